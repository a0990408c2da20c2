// Package postgres is weft's distributed store: any number of engines on any
// number of machines share one PostgreSQL database. Claims use FOR UPDATE
// SKIP LOCKED under READ COMMITTED; namespace caps are counted under a
// transaction-scoped advisory lock per namespace, so a cap holds across
// engines. The store's logic is shared with the SQLite store
// (internal/sqlstore); this package opens the database and applies the
// schema.
package postgres

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	neturl "net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/weftrun/weft/internal/redact"
	"github.com/weftrun/weft/internal/sqlstore"
	"github.com/weftrun/weft/store"
)

// migrations are the numbered schema changes, applied in order when a store
// opens (and by weft migrate).
//
//go:embed migrations/*.sql
var migrations embed.FS

// migrationLock is the advisory lock key under which the schema is applied,
// so that engines starting together do not race.
const migrationLock = 0x77656674 // "weft"

// Options configure a Store.
type Options struct {
	// Schema holds weft's tables, so several installations can share a
	// database. Default: the URL's search_path, else "public".
	Schema string
	// Aging is how long a ready step waits to gain one priority level.
	// Default one minute.
	Aging time.Duration
	// MaxConns bounds the store's connections: a quarter of them (at
	// least one) claim steps, an eighth (at least one) record outcomes,
	// the rest serve everything else. Default: the URL's pool_max_conns,
	// else 20; at least 3.
	MaxConns int
	// Clock returns the current time; tests set it. Default time.Now.
	Clock func() time.Time
	// Logger receives the listener's reconnection warnings, and a
	// migration's about the audit trail's partitions. Default
	// slog.Default().
	Logger *slog.Logger
	// Existing refuses a schema weft's tables are not in (a mistyped
	// search_path or database) instead of creating them: for commands
	// that only read.
	Existing bool
}

// Store is a store.Store on PostgreSQL.
type Store struct {
	*sqlstore.Store
	db           *sql.DB // database/sql on the store's pool
	stopListener context.CancelFunc
	listening    chan struct{} // closed when the listener has stopped
	// heard is set while the listener's LISTEN is in force.
	heard *atomic.Bool
}

var _ store.Listener = Store{}

// Listening reports whether the store hears the notifications of other
// processes now: its listener's LISTEN is in force.
func (s Store) Listening() bool { return s.heard.Load() }

// Close stops the listener and closes the connections.
func (s Store) Close() error {
	s.stopListener()
	<-s.listening
	return errors.Join(s.db.Close(), s.Store.Close())
}

// DB returns a database/sql handle on the store's connection pool, for
// tests and tools.
func (s Store) DB() *sql.DB { return s.db }

// InsertTasksTx submits tasks inside the caller's transaction: they exist
// only if it commits. Engines in other processes are notified when it
// commits.
func (s Store) InsertTasksTx(ctx context.Context, tx pgx.Tx, tasks []store.TaskInsert) ([]store.InsertResult, error) {
	return s.InsertTasksIn(ctx, querier{tx}, tasks)
}

// InsertTasksInTx submits tasks inside the caller's transaction, a pgx.Tx
// or a *sql.Tx on this database (through pgx's stdlib driver): they exist
// only if it commits, and engines are notified when it does.
func (s Store) InsertTasksInTx(ctx context.Context, tx any, tasks []store.TaskInsert) ([]store.InsertResult, error) {
	switch tx := tx.(type) {
	case pgx.Tx:
		return s.InsertTasksTx(ctx, tx, tasks)
	case *sql.Tx:
		return s.InsertTasksSQLTx(ctx, tx, tasks)
	}
	return nil, store.UnsupportedTx(tx, "a pgx.Tx or a *sql.Tx")
}

var (
	_ store.Store      = Store{}
	_ store.TxInserter = Store{}
)

var schemaName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// maxConnsInURL reports whether url, a postgres:// URL or a key=value
// string, sets pgx's pool_max_conns.
func maxConnsInURL(url string) bool {
	if u, err := neturl.Parse(url); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		return u.Query().Has("pool_max_conns")
	}
	return dsnMaxConns.MatchString(url)
}

var dsnMaxConns = regexp.MustCompile(`(^|\s)pool_max_conns\s*=`)

// Open connects to the database a postgres:// URL names and brings weft's
// schema up to date.
func Open(ctx context.Context, url string, opts Options) (Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return Store{}, fmt.Errorf("postgres: parse URL: %w", redact.Error(err, url))
	}
	if opts.MaxConns == 0 && maxConnsInURL(url) {
		if cfg.MaxConns < 3 {
			return Store{}, fmt.Errorf("postgres: pool_max_conns=%d in the URL: at least 3 (claims and outcomes have connections of their own)", cfg.MaxConns)
		}
		opts.MaxConns = int(cfg.MaxConns)
	}
	return open(ctx, cfg, url, opts)
}

// open is Open of the pool configuration parsed from url.
func open(ctx context.Context, cfg *pgxpool.Config, url string, opts Options) (Store, error) {
	params := cfg.ConnConfig.RuntimeParams
	if opts.Schema == "" {
		opts.Schema, _, _ = strings.Cut(params["search_path"], ",")
		opts.Schema = strings.TrimSpace(opts.Schema)
	}
	if opts.Schema == "" {
		opts.Schema = "public"
	}
	if !schemaName.MatchString(opts.Schema) {
		return Store{}, fmt.Errorf("postgres: schema %q: use letters, digits and underscores", opts.Schema)
	}
	params["search_path"] = opts.Schema
	// weft's statements are short index reads and writes: compiling one
	// with JIT costs more than running it (hundreds of milliseconds for a
	// list read whose row count the planner overestimates), so connections
	// run without JIT unless the URL asks for it.
	if _, set := params["jit"]; !set {
		params["jit"] = "off"
	}
	switch {
	case opts.MaxConns == 0:
		opts.MaxConns = 20
	case opts.MaxConns < 3:
		return Store{}, fmt.Errorf("postgres: MaxConns %d: at least 3 (claims and outcomes have connections of their own)", opts.MaxConns)
	}
	cfg.MaxConnIdleTime = 5 * time.Minute
	pdb, err := openPoolDB(ctx, cfg, opts.MaxConns)
	if err != nil {
		return Store{}, fmt.Errorf("postgres: %w", redact.Error(err, url))
	}
	// database/sql on the general pool, for the schema's version and for
	// tools.
	db := stdlib.OpenDBFromPool(pdb.pool)
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if err := upgrade(ctx, db, cfg, opts.Schema, opts.Existing, opts.Logger); err != nil {
		db.Close()
		pdb.Close()
		return Store{}, fmt.Errorf("postgres: %w", redact.Error(err, url))
	}
	// Engines are woken through a channel per schema, so installations
	// sharing a database do not wake each other.
	channel := "weft_ready_" + opts.Schema
	channel = channel[:min(len(channel), 63)] // PostgreSQL's identifier limit
	st := Store{Store: sqlstore.New(sqlstore.Config{
		DB: pdb, Aging: opts.Aging, Clock: opts.Clock,
		Dialect: dialect{channel: channel},
	}), db: db, listening: make(chan struct{}), heard: new(atomic.Bool)}
	listenCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	st.stopListener = stop
	go func() {
		defer close(st.listening)
		st.listen(listenCtx, cfg.ConnConfig.Copy(), channel, opts.Logger)
	}()
	return st, nil
}

// upgrade brings the schema up to date. A current schema costs one read on
// a connection of the pool, and is left alone. Otherwise the migrations run
// on a connection of their own, closed once they are done, never one the
// engine writes on later: a server process that had run them (even an
// UPDATE of no rows of api_keys) then wrote the engine's bulk submissions
// 15 to 20% slower, as measured with the bench's submit scenario; why,
// inside PostgreSQL, is not known.
func upgrade(ctx context.Context, db *sql.DB, cfg *pgxpool.Config, schemaName string, existing bool, log *slog.Logger) error {
	ms, err := sqlstore.LoadMigrations(migrations, "migrations")
	if err != nil {
		return err
	}
	var v sql.NullInt64
	err = db.QueryRowContext(ctx, `SELECT max(version) FROM weft_schema`).Scan(&v)
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "42P01" && existing:
		return fmt.Errorf("no weft tables in schema %q of this database (choose the database, and search_path, with --db or WEFT_DB): %w", schemaName, store.ErrNotFound)
	case errors.As(err, &pgErr) && pgErr.Code == "42P01": // undefined_table: no schema yet
	case err != nil:
		return fmt.Errorf("read the schema's version: %w", unavailable(err))
	case int(v.Int64) == len(ms):
		return nil
	}
	mdb := stdlib.OpenDB(*cfg.ConnConfig.Copy())
	defer mdb.Close()
	if err := migrate(ctx, mdb, ms, schemaName); err != nil {
		return err
	}
	// The audit trail's first partitions, where the clock has none, so
	// that what is written before the maintenance leader's first round has
	// a partition of its own, not audit_default, which that round would
	// then move out of under the lock that makes writers wait. Writes do
	// not need them: a failure (the table too busy to lock) is the
	// leader's to mend.
	now, parts, err := partitions(ctx, mdb)
	if err == nil {
		_, err = createPartitions(ctx, mdb, historySpan(0), now, parts)
	}
	if err != nil {
		log.Warn("postgres: the audit trail's first partitions were not made; the maintenance leader makes them", "error", err)
	}
	return nil
}

// migrate applies the schema under an advisory lock.
func migrate(ctx context.Context, db *sql.DB, ms []sqlstore.Migration, schemaName string) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, migrationLock); err != nil {
		return fmt.Errorf("take the migration lock: %w", err)
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, migrationLock)
	if _, err := conn.ExecContext(ctx, `CREATE SCHEMA IF NOT EXISTS `+pgx.Identifier{schemaName}.Sanitize()); err != nil {
		return fmt.Errorf("create schema %s: %w", schemaName, err)
	}
	// Another process may have brought the schema up to date meanwhile: a
	// current schema is left alone, as even CREATE INDEX IF NOT EXISTS
	// takes table locks, which would queue behind, or deadlock with, the
	// engines already working on this database.
	return sqlstore.Migrate(ctx, conn, ms, `INSERT INTO weft_schema (version) VALUES ($1)`)
}
