package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"sync"
)

// DB is how a Store reaches its database. Backends adapt their driver to it:
// SQLite through database/sql (SQLDB), PostgreSQL through native pgx. Queries
// arrive with the dialect's placeholders already in place.
type DB interface {
	// Begin starts a write transaction.
	Begin(ctx context.Context) (Tx, error)
	// Exec runs one write statement in a transaction of its own
	// (autocommit), for writes that stand alone: one round trip, where
	// Begin, the statement and Commit take three.
	Exec(ctx context.Context, q string, args ...any) (Result, error)
	// Query and QueryRow read outside any transaction.
	Query(ctx context.Context, q string, args ...any) (Rows, error)
	QueryRow(ctx context.Context, q string, args ...any) Row
	Close() error
}

// Querier runs statements inside one transaction: a Tx of the store's own,
// or a transaction the caller began and will commit.
type Querier interface {
	Exec(ctx context.Context, q string, args ...any) (Result, error)
	Query(ctx context.Context, q string, args ...any) (Rows, error)
	QueryRow(ctx context.Context, q string, args ...any) Row
}

// Copier is a Querier that also writes rows with PostgreSQL's COPY, which
// costs the database less per row than an INSERT of the same rows; bulk
// writes use it where the Querier has it.
type Copier interface {
	CopyFrom(ctx context.Context, table string, columns []string, rows CopySource) (int64, error)
}

// CopySource yields the rows of a COPY, one at a time; pgx.CopyFromSource
// is one. The slice Values returns is used before Next is called again.
type CopySource interface {
	Next() bool
	Values() ([]any, error)
	Err() error
}

// Tx is a write transaction begun by the store.
type Tx interface {
	Querier
	Commit(ctx context.Context) error
	Rollback(ctx context.Context) error
}

// Pipeliner is a Tx that sends a statement whose result nobody reads ahead
// of the transaction's next statement (or its COMMIT: a transaction's audit
// rows and its notification go so), in that statement's round trip. A
// queued statement's error is returned by the statement it went with,
// prefixed with the queued statement's What; one sent with the COMMIT fails
// the commit.
//
// Follow sends a statement right after the transaction's next one, in its
// round trip, and returns its rows, to read once that statement's result
// has been read; rows nobody reads are discarded before the transaction's
// next statement.
type Pipeliner interface {
	Queue(st Statement)
	Follow(st Statement) Rows
}

// Statement is a statement, in the database's placeholders, and its
// arguments. What, if set, says what it does, for its errors.
type Statement struct {
	Query string
	Args  []any
	What  string
}

// Rows is the result of a query; *sql.Rows is one.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close() error
}

// Row is the result of a one-row query; *sql.Row is one. Scan reports
// sql.ErrNoRows (or an error wrapping it) when there is no row.
type Row interface {
	Scan(dest ...any) error
}

// Result is what a statement changed; sql.Result is one.
type Result interface {
	RowsAffected() (int64, error)
}

// SQLDB is a DB on database/sql handles: writes on Writer, reads on Reader
// (which may be Writer).
type SQLDB struct {
	w, r *sql.DB
	// cache, if not nil, holds statements prepared on the writer, for
	// drivers that do not cache them themselves.
	cache *stmtCache
}

// NewSQLDB returns a DB on database/sql handles. With cacheStatements, the
// statements of write transactions are prepared once on the writer
// connection and reused, which pays off when the writer is one connection.
func NewSQLDB(writer, reader *sql.DB, cacheStatements bool) *SQLDB {
	d := &SQLDB{w: writer, r: reader}
	if cacheStatements {
		d.cache = &stmtCache{db: writer, stmts: map[string]*sql.Stmt{}}
	}
	return d
}

// Begin starts a transaction on the writer.
func (d *SQLDB) Begin(ctx context.Context) (Tx, error) {
	tx, err := d.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	return &sqlTx{SQLQuerier: SQLQuerier{Tx: tx, cache: d.cache}}, nil
}

// Exec runs one statement on the writer, in a transaction of its own.
func (d *SQLDB) Exec(ctx context.Context, q string, args ...any) (Result, error) {
	return d.w.ExecContext(ctx, q, args...)
}

// Query reads on the readers.
func (d *SQLDB) Query(ctx context.Context, q string, args ...any) (Rows, error) {
	return d.r.QueryContext(ctx, q, args...)
}

// QueryRow reads one row on the readers.
func (d *SQLDB) QueryRow(ctx context.Context, q string, args ...any) Row {
	return d.r.QueryRowContext(ctx, q, args...)
}

// Close closes the statement cache and both handles.
func (d *SQLDB) Close() error {
	if d.cache != nil {
		d.cache.close()
	}
	if d.r == d.w {
		return d.w.Close()
	}
	return errors.Join(d.r.Close(), d.w.Close())
}

// SQLQuerier runs statements in a database/sql transaction, such as one a
// caller began to submit tasks atomically with its own writes.
type SQLQuerier struct {
	Tx    *sql.Tx
	cache *stmtCache
	// unprepared lists statements to add to the cache once the transaction
	// has released the connection: preparing them now would wait for it.
	unprepared []string
}

func (q *SQLQuerier) stmt(ctx context.Context, query string) *sql.Stmt {
	if q.cache == nil {
		return nil
	}
	st := q.cache.get(query)
	if st == nil {
		q.unprepared = append(q.unprepared, query)
		return nil
	}
	return q.Tx.StmtContext(ctx, st)
}

// Exec runs a statement.
func (q *SQLQuerier) Exec(ctx context.Context, query string, args ...any) (Result, error) {
	if st := q.stmt(ctx, query); st != nil {
		return st.ExecContext(ctx, args...)
	}
	return q.Tx.ExecContext(ctx, query, args...)
}

// Query runs a query.
func (q *SQLQuerier) Query(ctx context.Context, query string, args ...any) (Rows, error) {
	if st := q.stmt(ctx, query); st != nil {
		return st.QueryContext(ctx, args...)
	}
	return q.Tx.QueryContext(ctx, query, args...)
}

// QueryRow runs a one-row query.
func (q *SQLQuerier) QueryRow(ctx context.Context, query string, args ...any) Row {
	if st := q.stmt(ctx, query); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return q.Tx.QueryRowContext(ctx, query, args...)
}

// sqlTx is a store-begun transaction that fills the statement cache once it
// ends.
type sqlTx struct{ SQLQuerier }

func (t *sqlTx) Commit(ctx context.Context) error {
	err := t.Tx.Commit()
	t.prepare(ctx)
	return err
}

func (t *sqlTx) Rollback(ctx context.Context) error {
	err := t.Tx.Rollback()
	t.prepare(ctx)
	return err
}

func (t *sqlTx) prepare(ctx context.Context) {
	if len(t.unprepared) > 0 && ctx.Err() == nil {
		t.cache.prepare(ctx, t.unprepared)
	}
}

// maxCachedStatements bounds the statement cache; queries with IN lists of
// many lengths could otherwise grow it without limit.
const maxCachedStatements = 256

// stmtCache holds statements prepared on a one-connection writer.
type stmtCache struct {
	db    *sql.DB
	mu    sync.Mutex
	stmts map[string]*sql.Stmt
}

func (c *stmtCache) get(q string) *sql.Stmt {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stmts[q]
}

// prepare adds statements to the cache. It must not run inside a write
// transaction: it needs the writer connection.
func (c *stmtCache) prepare(ctx context.Context, qs []string) {
	for _, q := range qs {
		if c.get(q) != nil {
			continue
		}
		st, err := c.db.PrepareContext(ctx, q)
		if err != nil {
			continue // the statement runs unprepared, as before
		}
		c.mu.Lock()
		if old, ok := c.stmts[q]; ok {
			old.Close()
		}
		if len(c.stmts) >= maxCachedStatements {
			for k, old := range c.stmts {
				old.Close()
				delete(c.stmts, k)
				break
			}
		}
		c.stmts[q] = st
		c.mu.Unlock()
	}
}

func (c *stmtCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, st := range c.stmts {
		st.Close()
	}
	c.stmts = map[string]*sql.Stmt{}
}
