package postgres

import (
	"context"
	"maps"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/weftrun/weft/internal/sqlstore/sqldb"
)

// pgxRunner is what a pool, a connection and a transaction of pgx share.
type pgxRunner interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, rows pgx.CopyFromSource) (int64, error)
}

// querier adapts pgx to sqldb.Querier. Statements go through pgx's own
// per-connection statement cache.
type querier struct{ r pgxRunner }

func (q querier) Exec(ctx context.Context, sql string, args ...any) (sqldb.Result, error) {
	tag, err := q.r.Exec(ctx, sql, args...)
	return commandTag(tag), unavailable(err)
}

func (q querier) Query(ctx context.Context, sql string, args ...any) (sqldb.Rows, error) {
	rows, err := q.r.Query(ctx, sql, args...)
	if err != nil {
		return nil, unavailable(err)
	}
	return pgxRows{rows}, nil
}

func (q querier) QueryRow(ctx context.Context, sql string, args ...any) sqldb.Row {
	return row{q.r.QueryRow(ctx, sql, args...)}
}

func (q querier) CopyFrom(ctx context.Context, table string, columns []string, rows sqldb.CopySource) (int64, error) {
	var n int64
	var err error
	switch r := q.r.(type) {
	case *pgxpool.Conn:
		n, err = copyRows(ctx, r.Conn(), table, columns, rows)
	case pgx.Tx:
		n, err = copyRows(ctx, r.Conn(), table, columns, rows)
	default:
		n, err = q.r.CopyFrom(ctx, pgx.Identifier{table}, columns, rows)
	}
	return n, unavailable(err)
}

var _ sqldb.Copier = querier{}

type row struct{ pgx.Row }

func (r row) Scan(dest ...any) error { return unavailable(r.Row.Scan(dest...)) }

type commandTag pgconn.CommandTag

func (t commandTag) RowsAffected() (int64, error) { return pgconn.CommandTag(t).RowsAffected(), nil }

type pgxRows struct{ pgx.Rows }

func (r pgxRows) Close() error {
	r.Rows.Close()
	return unavailable(r.Rows.Err())
}

func (r pgxRows) Err() error { return unavailable(r.Rows.Err()) }

func (r pgxRows) Scan(dest ...any) error { return unavailable(r.Rows.Scan(dest...)) }

// poolDB is a sqldb.DB on a pgx pool, with pools of their own for claims
// and outcomes (BeginWork).
type poolDB struct {
	querier
	pool     *pgxpool.Pool
	claims   *pgxpool.Pool
	outcomes *pgxpool.Pool
}

func newPoolDB(pool, claims, outcomes *pgxpool.Pool) poolDB {
	return poolDB{querier{pool}, pool, claims, outcomes}
}

// outcomeSettings are the planner settings of the sessions that record
// outcomes, and claimSettings those of the sessions that claim. Both plan
// each statement once per connection: the custom plan of a statement of
// arrays (which knows their sizes) always looks cheaper than the generic
// one, so PostgreSQL would plan the claim statement at every call, 0.25 ms
// against 0.1 ms of running it, and a batch of outcomes' lock of its
// tasks too. Without sequential scans, a plan made while the tables were
// small reads them by index once they have grown.
//
// A claim also reads the ready index in order whatever the statistics
// say (a fresh queue's lag behind it), and never JIT-compiles its small
// statements: a plan whose cost the disabled sort inflates would cost half
// a second. Outcomes keep their sort: without it, their lock of the tasks
// in order read the whole tasks index, a second a batch.
//
// Set when a connection starts (in its startup message), they cost a
// transaction no statement; its own set_config would cost one.
var (
	outcomeSettings = map[string]string{
		"enable_seqscan":  "off",
		"plan_cache_mode": "force_generic_plan",
	}
	claimSettings = map[string]string{
		"enable_seqscan":    "off",
		"plan_cache_mode":   "force_generic_plan",
		"enable_sort":       "off",
		"enable_bitmapscan": "off",
		"jit":               "off",
	}
)

// openPoolDB opens the store's pools on cfg, maxConns connections in all:
// a quarter (at least one) claim and an eighth (at least one) record
// outcomes, each on sessions with their planner settings, and the rest
// serve everything else.
func openPoolDB(ctx context.Context, cfg *pgxpool.Config, maxConns int) (poolDB, error) {
	claimCfg := workConfig(cfg, max(1, maxConns/4), claimSettings)
	outcomeCfg := workConfig(cfg, max(1, maxConns/8), outcomeSettings)
	mainCfg := cfg.Copy()
	mainCfg.MaxConns = int32(maxConns) - claimCfg.MaxConns - outcomeCfg.MaxConns
	pool, err := pgxpool.NewWithConfig(ctx, mainCfg)
	if err != nil {
		return poolDB{}, err
	}
	claims, err := pgxpool.NewWithConfig(ctx, claimCfg)
	if err != nil {
		pool.Close()
		return poolDB{}, err
	}
	outcomes, err := pgxpool.NewWithConfig(ctx, outcomeCfg)
	if err != nil {
		pool.Close()
		claims.Close()
		return poolDB{}, err
	}
	return newPoolDB(pool, claims, outcomes), nil
}

// workConfig is cfg for a pool of conns connections whose sessions carry
// settings. It keeps one open, so that a claim or an outcome does not wait
// for a connection to start (a new engine's first claim, or the first
// after a pause).
func workConfig(cfg *pgxpool.Config, conns int, settings map[string]string) *pgxpool.Config {
	c := cfg.Copy()
	c.MaxConns = int32(conns)
	c.MinConns = 1
	maps.Copy(c.ConnConfig.RuntimeParams, settings)
	return c
}

// Begin takes a connection for a write transaction whose BEGIN goes to
// the server with its first statement, in one round trip (a pgx batch):
// a claim or a completion makes one round trip fewer.
func (d poolDB) Begin(ctx context.Context) (sqldb.Tx, error) { return begin(ctx, d.pool) }

// BeginWork is Begin on a connection of the pool of work w, whose
// session carries its planner settings.
func (d poolDB) BeginWork(ctx context.Context, w sqldb.Work) (sqldb.Tx, error) {
	switch w {
	case sqldb.Claims:
		return begin(ctx, d.claims)
	case sqldb.Outcomes:
		return begin(ctx, d.outcomes)
	}
	return d.Begin(ctx)
}

// begin takes a connection of pool for a write transaction (Begin).
func begin(ctx context.Context, pool *pgxpool.Pool) (sqldb.Tx, error) {
	c, err := pool.Acquire(ctx)
	if err != nil {
		return nil, unavailable(err)
	}
	return &poolTx{conn: c}, nil
}

// ReadBatch sends reads in one batch, one round trip, in one read-only
// REPEATABLE READ transaction, so that they see one snapshot, and gives
// each one's rows to read in turn. A connection left in the transaction
// by a failed read is not idle, so the pool destroys it.
func (d poolDB) ReadBatch(ctx context.Context, sts []sqldb.Statement, read func(i int, rows sqldb.Rows) error) error {
	b := &pgx.Batch{}
	b.Queue("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
	for _, st := range sts {
		b.Queue(st.Query, st.Args...)
	}
	b.Queue("COMMIT")
	br := d.pool.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		return closing(br, err)
	}
	for i := range sts {
		rows, err := br.Query()
		if err != nil {
			return closing(br, err)
		}
		err = read(i, pgxRows{rows})
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
		if err != nil {
			return closing(br, err)
		}
	}
	_, err := br.Exec()
	return closing(br, err)
}

// Snapshot runs fn's reads in one read-only REPEATABLE READ transaction:
// one snapshot.
func (d poolDB) Snapshot(ctx context.Context, fn func(q sqldb.Querier) error) error {
	tx, err := d.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return unavailable(err)
	}
	// After Commit, or undoing nothing: the transaction only read.
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := fn(querier{tx}); err != nil {
		return err
	}
	return unavailable(tx.Commit(ctx))
}

var (
	_ sqldb.ReadBatcher  = poolDB{}
	_ sqldb.Snapshotter  = poolDB{}
	_ sqldb.WorkBeginner = poolDB{}
)

func (d poolDB) Close() error {
	d.pool.Close()
	d.claims.Close()
	d.outcomes.Close()
	return nil
}
