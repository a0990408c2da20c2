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
// version. A database whose schema is newer than ms is refused. Callers
// serialise concurrent migrations themselves (the PostgreSQL store under an
// advisory lock; SQLite's write lock does it for the SQLite store).
// insertVersion is the backend's INSERT of one version.
func Migrate(ctx context.Context, conn *sql.Conn, ms []Migration, insertVersion string) error {
	current, err := SchemaVersion(ctx, conn)
	if err != nil {
		return err
	}
	if newest := len(ms); current > newest {
		return fmt.Errorf("database schema version %d is newer than this weft (%d): upgrade weft", current, newest)
	}
	for _, m := range ms[current:] {
		if err := apply(ctx, conn, m, insertVersion); err != nil {
			return err
		}
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

func apply(ctx context.Context, conn *sql.Conn, m Migration, insertVersion string) error {
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migration %s: begin: %w", m.Name, err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
		return fmt.Errorf("migration %s: %w", m.Name, err)
	}
	if _, err := tx.ExecContext(ctx, insertVersion, m.Version); err != nil {
		return fmt.Errorf("migration %s: record version: %w", m.Name, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migration %s: commit: %w", m.Name, err)
	}
	return nil
}
