package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strconv"
)

// Migration is one numbered change of a backend's schema, from a file named
// NNN_what.sql.
type Migration struct {
	Version int
	Name    string // the file name
	SQL     string
}

var migrationFile = regexp.MustCompile(`^([0-9]{3})_[a-z0-9_]+\.sql$`)

// LoadMigrations reads the migrations in dir of fsys in version order. The
// versions must run 1, 2, 3, … without gaps, so a missing file is noticed
// when the binary is built and tested, not in production.
func LoadMigrations(fsys fs.FS, dir string) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("read migrations: %w", err)
	}
	var ms []Migration
	for _, e := range entries {
		m := migrationFile.FindStringSubmatch(e.Name())
		if m == nil {
			return nil, fmt.Errorf("migration %s: name it NNN_what.sql", e.Name())
		}
		v, _ := strconv.Atoi(m[1])
		b, err := fs.ReadFile(fsys, path.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", e.Name(), err)
		}
		ms = append(ms, Migration{Version: v, Name: e.Name(), SQL: string(b)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Version < ms[j].Version })
	for i, m := range ms {
		if m.Version != i+1 {
			return nil, fmt.Errorf("migration %s: expected version %03d", m.Name, i+1)
		}
	}
	return ms, nil
}

// Migrate applies on conn, in order, every migration newer than the version
// recorded in weft_schema, each in its own transaction together with its
// version. A database whose schema is newer than ms is refused.
//
// Several processes may migrate one database at once: each transaction
// re-reads the version after it has taken the write lock and applies only
// what is still missing, so a migration another process applied meanwhile
// is skipped, never applied twice. The transactions conn begins must
// therefore take the write lock when they begin (SQLite: _txlock=immediate)
// or the caller must serialise migrations itself (the PostgreSQL store holds
// an advisory lock). insertVersion is the backend's INSERT of one version.
func Migrate(ctx context.Context, conn *sql.Conn, ms []Migration, insertVersion string) error {
	current, err := SchemaVersion(ctx, conn)
	if err != nil {
		return err
	}
	if err := checkNotNewer(current, ms); err != nil {
		return err
	}
	for current < len(ms) {
		if current, err = applyNext(ctx, conn, ms, insertVersion); err != nil {
			return err
		}
	}
	return nil
}

func checkNotNewer(current int, ms []Migration) error {
	if newest := len(ms); current > newest {
		return fmt.Errorf("database schema version %d is newer than this weft (%d): upgrade weft", current, newest)
	}
	return nil
}

// SchemaVersion returns the newest migration recorded on conn, 0 for an
// empty database.
func SchemaVersion(ctx context.Context, conn *sql.Conn) (int, error) {
	if _, err := conn.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS weft_schema (version BIGINT NOT NULL)`); err != nil {
		return 0, fmt.Errorf("create weft_schema: %w", err)
	}
	var v sql.NullInt64
	if err := conn.QueryRowContext(ctx, `SELECT max(version) FROM weft_schema`).Scan(&v); err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	return int(v.Int64), nil
}

// applyNext applies, in one transaction, the migration that follows the
// version it reads inside that transaction, and returns the version the
// database is at afterwards.
func applyNext(ctx context.Context, conn *sql.Conn, ms []Migration, insertVersion string) (int, error) {
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("migration: begin: %w", err)
	}
	defer tx.Rollback()
	var v sql.NullInt64
	if err := tx.QueryRowContext(ctx, `SELECT max(version) FROM weft_schema`).Scan(&v); err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	current := int(v.Int64)
	if err := checkNotNewer(current, ms); err != nil || current == len(ms) {
		return current, err // another process finished the work
	}
	m := ms[current]
	if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
		return 0, fmt.Errorf("migration %s: %w", m.Name, err)
	}
	if _, err := tx.ExecContext(ctx, insertVersion, m.Version); err != nil {
		return 0, fmt.Errorf("migration %s: record version: %w", m.Name, err)
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("migration %s: commit: %w", m.Name, err)
	}
	return m.Version, nil
}
