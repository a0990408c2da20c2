// Package sqlite is weft's embedded store: one SQLite file in WAL mode, one
// writer connection per process (transactions begin IMMEDIATE so writers
// queue instead of failing) and a pool of readers. The store's logic is
// shared with the PostgreSQL store (internal/sqlstore).
package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/weftrun/weft/internal/sqlstore"
	"github.com/weftrun/weft/internal/sqlstore/sqldb"
	"github.com/weftrun/weft/store"
)

// migrations are the numbered schema changes, applied in order when a store
// opens (and by weft migrate).
//
//go:embed migrations/*.sql
var migrations embed.FS

// Options configure a Store.
type Options struct {
	// Aging is how long a ready step waits to gain one priority level, so
	// old low-priority work is not starved. Default one minute.
	Aging time.Duration
	// BusyTimeout is how long a writer waits for another process's write
	// lock. Default five seconds.
	BusyTimeout time.Duration
	// Clock returns the current time; tests set it. Default time.Now.
	Clock func() time.Time
	// ReadOnly opens an existing file for reading only: no migration runs,
	// the schema must be current, and every write fails. It works on a
	// file the process may not write, or on read-only media. A schema
	// behind this build's is waited for while it advances (another
	// process migrating the file, one migration at a time), until it
	// stays unchanged for a few seconds.
	ReadOnly bool

	// schemaStall and schemaPolled are set by the tests (export_test.go):
	// how long a schema behind may stay unchanged before ReadOnly gives
	// up (default defaultSchemaStall), and a function called with the
	// version found at each look.
	schemaStall  time.Duration
	schemaPolled func(version int)
}

// defaultSchemaStall is how long a read-only open waits for a schema
// behind this build's to advance before it gives up.
const defaultSchemaStall = 3 * time.Second

// Store is a store.Store on a SQLite file.
type Store struct {
	*sqlstore.Store
	w      *sql.DB
	db     *sqldb.SQLDB // the store's own connections (tests reach its writer)
	path   string
	opened os.FileInfo // the file opened at path; nil if it could not be told
}

// CheckFile reports whether the file at the store's path is still the one
// it opened: deleted or replaced (by a restore, a mistaken rm, a deploy
// that writes a new file), the store's connections would go on writing into
// a file nobody else sees. It returns an error wrapping
// store.ErrDatabaseGone then, another error when the path cannot be
// examined.
func (s Store) CheckFile() error { return checkFile(s.path, s.opened) }

// checkFile reports whether the file at path is still opened (CheckFile);
// nil when opened is nil.
func checkFile(path string, opened os.FileInfo) error {
	if opened == nil {
		return nil
	}
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("sqlite: %s was deleted: %w", path, store.ErrDatabaseGone)
	case err != nil:
		return fmt.Errorf("sqlite: check %s: %w", path, err)
	case !os.SameFile(fi, opened):
		return fmt.Errorf("sqlite: %s was replaced by another file: %w", path, store.ErrDatabaseGone)
	}
	return nil
}

// DB returns the writer's database/sql handle, for tests and tools that
// inspect the file directly and for transactions of the caller's own
// (InsertTasksInTx). The store holds one of its two connections for its
// own writes; the other serves these.
func (s Store) DB() *sql.DB { return s.w }

// InsertTasksInTx submits tasks inside the caller's *sql.Tx on this file
// (opened from DB, or from the caller's own handle on the same file): they
// exist only if it commits.
func (s Store) InsertTasksInTx(ctx context.Context, tx any, tasks []store.TaskInsert) ([]store.InsertResult, error) {
	if tx, ok := tx.(*sql.Tx); ok {
		return s.InsertTasksSQLTx(ctx, tx, tasks)
	}
	return nil, store.UnsupportedTx(tx, "a *sql.Tx")
}

var (
	_ store.Store       = Store{}
	_ store.TxInserter  = Store{}
	_ store.FileChecker = Store{}
)

// Open opens (creating if needed) the database file at path and brings its
// schema up to date.
func Open(ctx context.Context, path string, opts Options) (Store, error) {
	if path == "" {
		return Store{}, errors.New("sqlite: empty database path")
	}
	if opts.BusyTimeout <= 0 {
		opts.BusyTimeout = 5 * time.Second
	}
	if opts.ReadOnly {
		return openReadOnly(ctx, path, opts)
	}
	q := url.Values{}
	q.Set("_busy_timeout", fmt.Sprint(opts.BusyTimeout.Milliseconds()))
	q.Set("_journal_mode", "WAL")
	q.Set("_synchronous", "NORMAL")
	q.Set("_foreign_keys", "off")
	q.Set("_txlock", "immediate")
	// database/sql uses a connection from one goroutine at a time, so
	// SQLite's own mutex around every call on it (its default, serialized
	// mode) only costs: five percent of fanout5's workflows a second.
	q.Set("_mutex", "no")
	w, err := sql.Open(writerDriverName, fileURI(path)+"?"+q.Encode())
	if err != nil {
		return Store{}, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	// The store's writes run on one connection it holds (NewSQLDB), so
	// that they queue in this process instead of contending for the file
	// lock; a second one serves transactions of the caller's own (DB).
	w.SetMaxOpenConns(2)
	w.SetMaxIdleConns(2)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)
	if err := migrate(ctx, w, opts.BusyTimeout); err != nil {
		w.Close()
		if _, serr := os.Stat(path); serr == nil && isCantOpen(err) {
			err = fmt.Errorf("%w (the file exists but cannot be opened for writing: is it, or its directory, read-only? Commands that only read, such as weft tasks, open it read-only)", err)
		}
		return Store{}, fmt.Errorf("sqlite: %s: %w", path, err)
	}
	// The file just opened (and created if new): CheckFile compares the
	// path with it. A path that is not a plain file (":memory:") is not
	// checked.
	opened, _ := os.Stat(path)
	// The checkpointer's connection (checkpoint.go).
	c, err := sql.Open(driverName, fileURI(path)+"?"+url.Values{"_busy_timeout": {q.Get("_busy_timeout")}, "_synchronous": {q.Get("_synchronous")}}.Encode())
	if err != nil {
		w.Close()
		return Store{}, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	c.SetMaxOpenConns(1)
	ck, err := startCheckpointer(ctx, c, path, opened)
	if err != nil {
		w.Close()
		c.Close()
		return Store{}, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	q.Set("_txlock", "deferred")
	q.Set("mode", "ro")
	q.Set("_stmt_cache_size", readerStatements)
	r, err := sql.Open(driverName, fileURI(path)+"?"+q.Encode())
	if err != nil {
		w.Close()
		ck.close()
		return Store{}, fmt.Errorf("sqlite: open readers %s: %w", path, err)
	}
	r.SetMaxOpenConns(4)
	r.SetMaxIdleConns(4)
	// The store prepares its writes' statements once, on the connection
	// it holds; the readers' are kept by the driver (readerStatements).
	db, err := sqldb.NewSQLDB(ctx, w, r, true)
	if err != nil {
		w.Close()
		ck.close()
		r.Close()
		return Store{}, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	return Store{Store: sqlstore.New(sqlstore.Config{
		DB: checkpointedDB{db, ck}, Aging: opts.Aging, Clock: opts.Clock,
		Dialect: dialect{},
	}), w: w, db: db, path: path, opened: opened}, nil
}

// readerStatements is how many prepared statements the driver keeps on
// each reader connection (its _stmt_cache_size; none by default): without
// them every read prepared its statements again, a third of the time a
// task's read took (BenchmarkGetTask 211, 245, 221 -> 136, 187, 144 µs).
const readerStatements = "128"

func migrate(ctx context.Context, db *sql.DB, busyTimeout time.Duration) error {
	ms, err := sqlstore.LoadMigrations(migrations, "migrations")
	if err != nil {
		return err
	}
	// The first connection switches a new file to WAL, which needs the
	// file to itself: SQLite answers BUSY at once, without its busy
	// handler, when another process is doing the same. Try again, within
	// the busy timeout.
	var conn *sql.Conn
	for deadline := time.Now().Add(busyTimeout); ; {
		conn, err = db.Conn(ctx)
		if err == nil || !isBusy(err) || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(5+rand.IntN(20)) * time.Millisecond):
		}
	}
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close()
	return sqlstore.Migrate(ctx, conn, ms, `INSERT INTO weft_schema (version) VALUES (?)`)
}

// openReadOnly opens an existing file for reading only. A file in WAL mode
// on media the process cannot write is read as immutable: nothing can be
// writing it then.
func openReadOnly(ctx context.Context, path string, opts Options) (Store, error) {
	opened, err := os.Stat(path)
	if err != nil {
		return Store{}, fmt.Errorf("sqlite: open %s read-only: %w", path, err)
	}
	q := url.Values{}
	q.Set("_busy_timeout", fmt.Sprint(opts.BusyTimeout.Milliseconds()))
	q.Set("_foreign_keys", "off")
	q.Set("mode", "ro")
	q.Set("_stmt_cache_size", readerStatements)
	var db *sql.DB
	for _, immutable := range []bool{false, true} {
		if immutable {
			q.Set("immutable", "1")
		}
		if db, err = sql.Open(driverName, fileURI(path)+"?"+q.Encode()); err != nil {
			return Store{}, fmt.Errorf("sqlite: open %s read-only: %w", path, err)
		}
		if err = checkSchema(ctx, db, opts); err == nil || !isCantOpen(err) {
			break
		}
		db.Close()
	}
	if err != nil {
		db.Close()
		return Store{}, fmt.Errorf("sqlite: %s (read-only): %w", path, err)
	}
	db.SetMaxOpenConns(4)
	sdb, err := sqldb.NewSQLDB(ctx, db, db, false)
	if err != nil {
		db.Close()
		return Store{}, fmt.Errorf("sqlite: %s (read-only): %w", path, err)
	}
	return Store{Store: sqlstore.New(sqlstore.Config{
		DB: sdb, Aging: opts.Aging, Clock: opts.Clock,
		Dialect: dialect{readOnly: true},
	}), w: db, path: path, opened: opened}, nil
}

// checkSchema reports whether a file opened read-only holds the schema this
// build writes: it cannot be migrated from here. A schema behind it (or
// none yet: a file being created) may be another process's migration in
// progress, which commits one migration at a time: it waits while the
// version advances, and gives up once it stayed unchanged for
// opts.schemaStall, saying that a migration may be under way.
func checkSchema(ctx context.Context, db *sql.DB, opts Options) error {
	ms, err := sqlstore.LoadMigrations(migrations, "migrations")
	if err != nil {
		return err
	}
	want := ms[len(ms)-1].Version
	stall := opts.schemaStall
	if stall <= 0 {
		stall = defaultSchemaStall
	}
	last, since := -1, time.Now()
	for {
		got, err := schemaVersion(ctx, db)
		if err != nil {
			return err
		}
		if opts.schemaPolled != nil {
			opts.schemaPolled(got)
		}
		switch {
		case got > want:
			return fmt.Errorf("its schema is at version %d, newer than this weft knows (%d): use a newer weft", got, want)
		case got == want:
			return nil
		case got != last:
			last, since = got, time.Now()
		case time.Since(since) >= stall:
			return fmt.Errorf("its schema is at version %d and this weft needs %d, and it did not change for %s: if another weft process is setting the database up or upgrading it, retry once it is done; otherwise open it once with write access (weft migrate) to upgrade it", got, want, stall)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("its schema is at version %d and this weft needs %d (waiting for a migration in progress): %w", got, want, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// schemaVersion reads the newest migration recorded; 0 for a file that has
// none yet (being created by another process).
func schemaVersion(ctx context.Context, db *sql.DB) (int, error) {
	var exists bool
	err := db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'weft_schema')`).Scan(&exists)
	if err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	if !exists {
		return 0, nil
	}
	var v sql.NullInt64
	if err := db.QueryRowContext(ctx, `SELECT max(version) FROM weft_schema`).Scan(&v); err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	return int(v.Int64), nil
}

// fileURI is the SQLite URI filename of path: the characters a URI gives
// a meaning to ('%', '?', '#') are escaped, so that a file named with them
// opens as itself.
func fileURI(path string) string {
	return "file:" + strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(path)
}
