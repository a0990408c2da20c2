// Package sqldb is the database as the SQL store reaches it: the DB, Tx and
// Querier interfaces each backend adapts its driver to (SQLDB on database/sql,
// with the writer connection it holds for SQLite; store/postgres on pgx), the
// walk of a query's rows (Collect, Each), the rewriting of "?" placeholders
// (Binder) and the classification of a write's errors (WriteErr). The
// storage operations (package sqlstore) run their statements through these
// and never reach the driver around them.
package sqldb

import (
	"context"
	"database/sql"
	"errors"
)

// DB is how a store reaches its database. Backends adapt their driver to it:
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

// CopyMinRows is the fewest rows written with COPY: COPY costs the
// database less per row than an INSERT, but a round trip more (and new
// tasks' ids one more statement), which a few rows do not pay back.
const CopyMinRows = 64

// CopyRows is a CopySource of rows held in memory.
type CopyRows struct {
	rows [][]any
	next int
}

// NewCopyRows returns a CopySource of rows.
func NewCopyRows(rows [][]any) *CopyRows { return &CopyRows{rows: rows} }

func (r *CopyRows) Next() bool { r.next++; return r.next <= len(r.rows) }

func (r *CopyRows) Err() error { return nil }

func (r *CopyRows) Values() ([]any, error) { return r.rows[r.next-1], nil }

// Work is what a write transaction does, where a DB plans its statements
// under settings of their own (WorkBeginner).
type Work int

const (
	// Other: any write but these.
	Other Work = iota
	// Claims: a claim of ready steps.
	Claims
	// Outcomes: a batch of outcomes, and a claim of the steps they made
	// ready.
	Outcomes
)

// Claiming reports whether a transaction of work w may claim steps: its
// sessions plan a claim's statement to read the ready index and the
// claimed rows by key, whatever the tables' statistics say.
func (w Work) Claiming() bool { return w == Claims || w == Outcomes }

// WorkBeginner is a DB that runs claims and outcomes on connections of
// their own (BeginWork), whose sessions carry the planner settings of
// that work, so that no statement of theirs sets them (PostgreSQL's
// pools).
type WorkBeginner interface {
	BeginWork(ctx context.Context, w Work) (Tx, error)
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
//
// FollowLast is Follow with the transaction's COMMIT sent right after st,
// in the same round trip: the transaction ends with st (unless a
// statement fails), and the caller writes nothing more in it. Commit then
// sends only what was queued meanwhile, outside any transaction.
//
// EndWithNext makes the transaction's next statement its last: its COMMIT
// goes in the same round trip, and an error of it is the statement's (its
// rows' Close returns it).
type Pipeliner interface {
	Queue(st Statement)
	Follow(st Statement) Rows
	FollowLast(st Statement) Rows
	EndWithNext()
}

// ReadBatcher is a DB that runs reads that do not depend on each other in
// one snapshot of the database (and, on PostgreSQL, in one round trip), so
// that a record and its parts read together agree; read gets each one's
// rows in turn, which it reads (and may close) before the next is given.
type ReadBatcher interface {
	ReadBatch(ctx context.Context, sts []Statement, read func(i int, rows Rows) error) error
}

// Snapshotter is a DB that runs reads in one snapshot: the statements fn
// runs on q see the database as of one moment, so that reads that depend
// on each other (a list of tasks, then their steps) agree.
type Snapshotter interface {
	Snapshot(ctx context.Context, fn func(q Querier) error) error
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
	// held, if not nil, is a connection of the writer that the store keeps
	// for its own writes (NewSQLDB).
	held *heldConn
}

// NewSQLDB returns a DB on database/sql handles. With holdWriter, the store
// takes one connection of writer for as long as it is open and runs its
// writes there, its statements prepared on it once; the writer must allow
// a second connection for others (a caller's own transactions). Without,
// each write is a transaction of the writer's.
func NewSQLDB(ctx context.Context, writer, reader *sql.DB, holdWriter bool) (*SQLDB, error) {
	d := &SQLDB{w: writer, r: reader}
	if holdWriter {
		h, err := holdConn(ctx, writer)
		if err != nil {
			return nil, err
		}
		d.held = h
	}
	return d, nil
}

// Begin starts a transaction on the writer.
func (d *SQLDB) Begin(ctx context.Context) (Tx, error) {
	if d.held != nil {
		return d.held.begin(ctx)
	}
	tx, err := d.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	return &sqlTx{SQLQuerier{Tx: tx}}, nil
}

// Exec runs one statement on the writer, in a transaction of its own.
func (d *SQLDB) Exec(ctx context.Context, q string, args ...any) (Result, error) {
	if d.held != nil {
		return d.held.exec(ctx, q, args...)
	}
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

// ReadBatch runs reads in one read transaction on the readers (Snapshot).
func (d *SQLDB) ReadBatch(ctx context.Context, sts []Statement, read func(i int, rows Rows) error) error {
	return d.Snapshot(ctx, func(q Querier) error {
		for i, st := range sts {
			rows, err := q.Query(ctx, st.Query, st.Args...)
			if err != nil {
				return err
			}
			err = read(i, rows)
			if cerr := rows.Close(); err == nil {
				err = cerr
			}
			if err == nil {
				err = rows.Err()
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
}

// Snapshot runs fn's reads in one read transaction on the readers: one
// snapshot (SQLite's deferred BEGIN takes it at the first read).
func (d *SQLDB) Snapshot(ctx context.Context, fn func(q Querier) error) (err error) {
	tx, err := d.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return err
	}
	defer func() {
		if rerr := tx.Rollback(); err == nil && !errors.Is(rerr, sql.ErrTxDone) {
			err = rerr
		}
	}()
	if err := fn(&SQLQuerier{Tx: tx}); err != nil {
		return err
	}
	return tx.Commit()
}

var (
	_ ReadBatcher = (*SQLDB)(nil)
	_ Snapshotter = (*SQLDB)(nil)
)

// Close gives back the held connection and closes both handles.
func (d *SQLDB) Close() error {
	var err error
	if d.held != nil {
		err = d.held.close()
	}
	if d.r == d.w {
		return errors.Join(err, d.w.Close())
	}
	return errors.Join(err, d.r.Close(), d.w.Close())
}

// SQLQuerier runs statements in a database/sql transaction, such as one a
// caller began to submit tasks atomically with its own writes.
type SQLQuerier struct {
	Tx *sql.Tx
}

// Exec runs a statement.
func (q *SQLQuerier) Exec(ctx context.Context, query string, args ...any) (Result, error) {
	return q.Tx.ExecContext(ctx, query, args...)
}

// Query runs a query.
func (q *SQLQuerier) Query(ctx context.Context, query string, args ...any) (Rows, error) {
	return q.Tx.QueryContext(ctx, query, args...)
}

// QueryRow runs a one-row query.
func (q *SQLQuerier) QueryRow(ctx context.Context, query string, args ...any) Row {
	return q.Tx.QueryRowContext(ctx, query, args...)
}

// sqlTx is a store-begun transaction of database/sql.
type sqlTx struct{ SQLQuerier }

func (t *sqlTx) Commit(context.Context) error   { return t.Tx.Commit() }
func (t *sqlTx) Rollback(context.Context) error { return t.Tx.Rollback() }

// errRow is a row whose statement failed before it ran.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }
