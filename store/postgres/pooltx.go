package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/weftrun/weft/internal/sqlstore/sqldb"
)

// This file holds a write transaction on the pool (poolDB.Begin): its
// statements pipelined with its BEGIN and COMMIT, and the rows of those
// that follow others in one round trip.

// poolTx is a write transaction on one pooled connection, begun by its
// first statement. The pool destroys a connection released in any state
// but idle (a statement cut off, a transaction left open).
type poolTx struct {
	conn   *pgxpool.Conn
	begun  bool              // BEGIN was sent
	queued []sqldb.Statement // sent ahead of the next statement (Queue)
	follow *followRows       // sent after the next statement (Follow)
	open   *followRows       // sent, its batch still open until read or drained
	// commitNext: the COMMIT goes with the next statement, after what
	// follows it (EndWithNext, FollowLast); ended: the COMMIT was sent.
	commitNext, ended bool
}

// Queue sends st ahead of the next statement, in its round trip.
func (t *poolTx) Queue(st sqldb.Statement) { t.queued = append(t.queued, st) }

// Follow sends st right after the transaction's next statement, in its
// round trip, and returns its rows, to read once that statement's result
// is read. Rows left unread are discarded before the transaction's next
// statement.
func (t *poolTx) Follow(st sqldb.Statement) sqldb.Rows {
	f := &followRows{tx: t, st: st}
	t.follow = f
	return f
}

// FollowLast is Follow with the COMMIT sent right after st, in the same
// round trip: its result is read when st's rows are closed, and an error
// of it is theirs.
func (t *poolTx) FollowLast(st sqldb.Statement) sqldb.Rows {
	f := t.Follow(st)
	t.EndWithNext()
	return f
}

// EndWithNext sends the COMMIT right after the transaction's next
// statement (and the statement that follows it, if any), in its round
// trip.
func (t *poolTx) EndWithNext() { t.commitNext = true }

// direct reports whether the next statement goes alone: BEGIN was sent,
// nothing is queued or follows, no COMMIT goes with it, and the COMMIT was
// not sent (send refuses a statement after it).
func (t *poolTx) direct() bool {
	return t.begun && !t.ended && !t.commitNext && len(t.queued) == 0 && t.follow == nil && t.open == nil
}

// drain discards the rows of a followed statement nobody read, ending its
// batch, and returns its error: the connection is free for the next
// statement.
func (t *poolTx) drain() error {
	if t.open == nil {
		return nil
	}
	return t.open.Close()
}

// done ends the batch br of a statement whose result has been read, with
// that result's error: it closes br, or leaves it open for the statement
// that follows (Follow).
func (t *poolTx) done(br pgx.BatchResults, err error) error {
	if f := t.open; f != nil && f.br == nil {
		f.br = br
		if err != nil {
			f.err = err
		}
		return unavailable(err)
	}
	return closing(br, err)
}

// errEnded: a statement of a transaction whose COMMIT was sent
// (FollowLast); it would run outside it.
var errEnded = errors.New("a statement after the transaction's COMMIT was sent")

// send returns the batch that sends BEGIN (if it was not sent), the queued
// statements and the statement sql, having read the results of all but
// sql's; the caller reads that one and closes the batch.
func (t *poolTx) send(ctx context.Context, sql string, args []any) (pgx.BatchResults, error) {
	if t.ended {
		return nil, errEnded
	}
	if err := t.drain(); err != nil {
		return nil, err
	}
	b := &pgx.Batch{}
	begin := !t.begun
	if begin {
		b.Queue("BEGIN")
	}
	queued := t.queued
	t.queued = nil
	for _, st := range queued {
		b.Queue(st.Query, st.Args...)
	}
	b.Queue(sql, args...)
	if f := t.follow; f != nil {
		t.follow, t.open = nil, f
		b.Queue(f.st.Query, f.st.Args...)
	}
	if t.commitNext {
		b.Queue("COMMIT")
		t.commitNext, t.ended = false, true
	}
	br := t.conn.SendBatch(ctx, b)
	fail := func(err error) (pgx.BatchResults, error) {
		err = closing(br, err)
		if t.open != nil {
			t.open.err, t.open = err, nil
		}
		return nil, err
	}
	if begin {
		if _, err := br.Exec(); err != nil {
			return fail(err)
		}
		t.begun = true
	}
	for _, st := range queued {
		if _, err := br.Exec(); err != nil {
			return fail(queuedError(st, err))
		}
	}
	return br, nil
}

// queuedError is the error of a queued statement, saying which it was.
func queuedError(st sqldb.Statement, err error) error {
	if st.What == "" {
		return err
	}
	return fmt.Errorf("%s: %w", st.What, err)
}

// closing closes br and returns err or, if there is none, what closing
// returned (a failed statement's error comes back from both).
func closing(br pgx.BatchResults, err error) error {
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return unavailable(err)
}

func (t *poolTx) Exec(ctx context.Context, sql string, args ...any) (sqldb.Result, error) {
	if t.direct() {
		return querier{t.conn}.Exec(ctx, sql, args...)
	}
	br, err := t.send(ctx, sql, args)
	if err != nil {
		return nil, err
	}
	tag, err := br.Exec()
	return commandTag(tag), t.done(br, err)
}

func (t *poolTx) Query(ctx context.Context, sql string, args ...any) (sqldb.Rows, error) {
	if t.direct() {
		return querier{t.conn}.Query(ctx, sql, args...)
	}
	br, err := t.send(ctx, sql, args)
	if err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		return nil, t.done(br, err)
	}
	return batchRows{pgxRows{rows}, br, t}, nil
}

func (t *poolTx) QueryRow(ctx context.Context, sql string, args ...any) sqldb.Row {
	if t.direct() {
		return querier{t.conn}.QueryRow(ctx, sql, args...)
	}
	br, err := t.send(ctx, sql, args)
	if err != nil {
		return errRow{err}
	}
	return batchRow{br.QueryRow(), br, t}
}

func (t *poolTx) CopyFrom(ctx context.Context, table string, columns []string, rows sqldb.CopySource) (int64, error) {
	if !t.direct() {
		// BEGIN and the queued statements go first, in one round trip.
		if _, err := t.Exec(ctx, "SELECT 1"); err != nil {
			return 0, err
		}
	}
	return querier{t.conn}.CopyFrom(ctx, table, columns, rows)
}

// Commit sends the queued statements with COMMIT (and BEGIN, if no
// statement went before), in one batch; after an error it rolls back. The
// connection goes back to the pool either way.
func (t *poolTx) Commit(ctx context.Context) error {
	if t.conn == nil {
		return nil
	}
	t.follow = nil
	if t.ended {
		// The COMMIT went with the last statement (FollowLast), whose
		// rows read its result. Nothing may be queued after it.
		err := t.drain()
		if err == nil && len(t.queued) > 0 {
			err = fmt.Errorf("statements queued after the transaction's COMMIT was sent: %s", t.queued[0].What)
		}
		t.release()
		return err
	}
	if len(t.queued) == 0 && t.open == nil {
		// A bare COMMIT, if the transaction began.
		var err error
		if t.begun {
			_, err = t.conn.Exec(ctx, "COMMIT")
		}
		t.release()
		return unavailable(err)
	}
	br, err := t.send(ctx, "COMMIT", nil)
	if err == nil {
		_, err = br.Exec()
		err = closing(br, err)
	}
	if err != nil && !t.conn.Conn().IsClosed() {
		// A statement failed: those after it did not run, nor the
		// COMMIT. End the transaction (a warning if it ended already).
		_, _ = t.conn.Exec(context.WithoutCancel(ctx), "ROLLBACK")
	}
	t.release()
	return err
}

// Rollback ends the transaction, if it began, and gives the connection
// back.
func (t *poolTx) Rollback(ctx context.Context) error {
	if t.conn == nil {
		return nil
	}
	t.queued, t.follow = nil, nil
	_ = t.drain() // a followed statement's error: the transaction's, undone
	var err error
	if t.begun {
		_, err = t.conn.Exec(ctx, "ROLLBACK")
	}
	t.release()
	return unavailable(err)
}

// release gives the connection back to the pool.
func (t *poolTx) release() {
	t.conn.Release()
	t.conn = nil
}

var (
	_ sqldb.Copier    = (*poolTx)(nil)
	_ sqldb.Pipeliner = (*poolTx)(nil)
)

// batchRows are the rows of a statement sent in a batch: closing them
// closes the batch, or leaves it to the statement that follows.
type batchRows struct {
	pgxRows
	br pgx.BatchResults
	tx *poolTx
}

func (r batchRows) Close() error {
	r.Rows.Close()
	return r.tx.done(r.br, r.Rows.Err())
}

// batchRow is the row of a statement sent in a batch: scanning it closes
// the batch, or leaves it to the statement that follows.
type batchRow struct {
	pgx.Row
	br pgx.BatchResults
	tx *poolTx
}

func (r batchRow) Scan(dest ...any) error {
	return r.tx.done(r.br, r.Row.Scan(dest...))
}

// followRows are the rows of a statement sent after another (Follow),
// read from the batch once that one's result was.
type followRows struct {
	tx   *poolTx
	st   sqldb.Statement
	br   pgx.BatchResults // the batch, once the statement before was read
	rows pgx.Rows
	err  error
	done bool
	// discarded: closed before anyone read them (a later read fails).
	discarded bool
}

// errDiscarded is what a followed statement's rows read after they were
// discarded return.
var errDiscarded = errors.New("the rows of a followed statement were discarded before they were read")

func (f *followRows) Next() bool {
	if f.done || f.err != nil {
		return false
	}
	if f.rows == nil {
		if f.br == nil {
			f.err = errors.New("a followed statement read before the statement it follows")
			if f.tx.follow == f {
				f.err = errors.New("a followed statement read before it was sent")
			}
			return false
		}
		rows, err := f.br.Query()
		if err != nil {
			f.err = queuedError(f.st, err)
			return false
		}
		f.rows = rows
	}
	return f.rows.Next()
}

func (f *followRows) Scan(dest ...any) error {
	if f.rows == nil {
		return errors.New("scan before Next")
	}
	return unavailable(f.rows.Scan(dest...))
}

func (f *followRows) Err() error {
	if f.discarded {
		return errDiscarded
	}
	if f.err != nil {
		return unavailable(f.err)
	}
	if f.rows != nil {
		return unavailable(f.rows.Err())
	}
	return nil
}

// Close discards what is left of the rows and closes the batch.
func (f *followRows) Close() error {
	if f.done {
		return unavailable(f.err)
	}
	f.done = true
	if f.tx.open == f {
		f.tx.open = nil
	}
	unread := f.rows == nil
	if f.tx.follow == f {
		f.tx.follow = nil // never sent
		f.discarded = true
		return nil
	}
	var err error
	if f.rows != nil {
		f.rows.Close()
		err = f.rows.Err()
	}
	if f.br != nil {
		err = closing(f.br, err)
		f.br = nil
	}
	if f.err == nil && err != nil {
		f.err = queuedError(f.st, err)
	}
	err = f.Err()
	f.discarded = unread
	return err
}

// errRow is a row whose statement failed.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }
