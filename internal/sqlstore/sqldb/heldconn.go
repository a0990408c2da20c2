package sqldb

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
)

// heldConn is the writer connection a store keeps for its writes, one at a
// time, in transactions it begins and ends itself (BEGIN IMMEDIATE, COMMIT).
//
// It runs them on the driver's connection itself, not through database/sql:
//   - a database/sql Tx starts a goroutine for every query, to watch the
//     Tx's context until the rows close, which cost a statement inside a
//     write transaction 10 to 20 µs more than the same statement outside
//     one (a third of a claim's query of candidates);
//   - database/sql's conversion of every argument and every value read,
//     and its locks around each call, cost SQLite's one writer about 14 µs
//     a workflow of fanout5 (driverrows.go converts the few types the store
//     uses).
//
// The connection is taken from the writer handle (sql.Conn) for as long as
// the store is open and given back at close. Conn.Raw lends the driver's
// connection for the call only; the store keeps it past the call because
// the sql.Conn stays checked out of the pool until then: database/sql hands
// it to no one else, and closes a checked-out connection only once it is
// given back. Statements run under contexts that cannot be cancelled (the
// store's writes are, sqlstore.Dialect.WriteContext), so nothing watches them.
type heldConn struct {
	// turn is held by the write under way; closed is closed once close
	// has taken turn for good.
	turn   chan struct{}
	closed chan struct{}
	// conn is the handle's connection, given back at close; dc is its
	// driver connection, used by the write that holds turn.
	conn *sql.Conn
	dc   driver.ConnPrepareContext
	// stmts are the statements prepared on dc, used by the write that
	// holds turn.
	stmts map[string]heldStmt
	// args is the buffer of a statement's arguments as the driver's
	// values, used by the write that holds turn: the driver copies what
	// it binds (SQLITE_TRANSIENT) and keeps none of it.
	args []driver.NamedValue
}

// holdConn takes a connection of writer for a store's writes.
func holdConn(ctx context.Context, writer *sql.DB) (*heldConn, error) {
	c, err := writer.Conn(ctx)
	if err != nil {
		return nil, err
	}
	var dc driver.ConnPrepareContext
	if err := c.Raw(func(d any) error {
		var ok bool
		if dc, ok = d.(driver.ConnPrepareContext); !ok {
			return fmt.Errorf("the driver's connection %T cannot prepare with a context", d)
		}
		return nil
	}); err != nil {
		c.Close()
		return nil, err
	}
	return &heldConn{turn: make(chan struct{}, 1), closed: make(chan struct{}), conn: c, dc: dc, stmts: map[string]heldStmt{}}, nil
}

// heldStmt is a statement prepared on the held connection: it runs with a
// context, checked once when it is prepared.
type heldStmt interface {
	driver.Stmt
	driver.StmtExecContext
	driver.StmtQueryContext
}

// maxCachedStatements bounds the statements kept prepared on the held
// connection between writes (a write may add its own above it); queries
// with IN lists of many lengths could otherwise grow them without limit.
const maxCachedStatements = 256

// take waits for the writes before to end. With no statement of the
// connection running now, it closes statements past maxCachedStatements:
// closing one while its rows are being read would end them.
func (h *heldConn) take(ctx context.Context) error {
	select {
	case h.turn <- struct{}{}:
	case <-h.closed:
		return sql.ErrConnDone
	case <-ctx.Done():
		return ctx.Err()
	}
	for q, st := range h.stmts {
		if len(h.stmts) < maxCachedStatements {
			break
		}
		st.Close()
		delete(h.stmts, q)
	}
	return nil
}

func (h *heldConn) give() { <-h.turn }

func (h *heldConn) begin(ctx context.Context) (Tx, error) {
	if err := h.take(ctx); err != nil {
		return nil, err
	}
	if _, err := h.execQ(ctx, "BEGIN IMMEDIATE", nil); err != nil {
		h.give()
		return nil, err
	}
	return &heldTx{h: h}, nil
}

// exec runs one statement in a transaction of its own.
func (h *heldConn) exec(ctx context.Context, q string, args ...any) (Result, error) {
	if err := h.take(ctx); err != nil {
		return nil, err
	}
	defer h.give()
	return h.execQ(ctx, q, args)
}

// stmt returns q prepared on the connection; the caller holds turn.
func (h *heldConn) stmt(ctx context.Context, q string) (heldStmt, error) {
	if st, ok := h.stmts[q]; ok {
		return st, nil
	}
	ds, err := h.dc.PrepareContext(ctx, q)
	if err != nil {
		return nil, err
	}
	st, ok := ds.(heldStmt)
	if !ok {
		ds.Close()
		return nil, fmt.Errorf("the driver's statement %T cannot run with a context", ds)
	}
	h.stmts[q] = st
	return st, nil
}

// prepared returns q prepared on the connection and args as the driver's
// values.
func (h *heldConn) prepared(ctx context.Context, q string, args []any) (heldStmt, []driver.NamedValue, error) {
	st, err := h.stmt(ctx, q)
	if err != nil {
		return nil, nil, err
	}
	nv, err := namedValues(h.args, args)
	if err == nil {
		h.args = nv
	}
	return st, nv, err
}

// execQ runs q, prepared once on the connection (BEGIN and COMMIT too),
// with args.
func (h *heldConn) execQ(ctx context.Context, q string, args []any) (Result, error) {
	st, nv, err := h.prepared(ctx, q, args)
	if err != nil {
		return nil, err
	}
	return st.ExecContext(ctx, nv)
}

func (h *heldConn) query(ctx context.Context, q string, args []any) (Rows, error) {
	st, nv, err := h.prepared(ctx, q, args)
	if err != nil {
		return nil, err
	}
	rows, err := st.QueryContext(ctx, nv)
	if err != nil {
		return nil, err
	}
	return newDriverRows(rows), nil
}

func (h *heldConn) close() error {
	h.turn <- struct{}{} // no write is under way, nor begins
	close(h.closed)
	for _, st := range h.stmts {
		st.Close()
	}
	return h.conn.Close()
}

// heldTx is a write transaction on the held connection.
type heldTx struct {
	h     *heldConn
	ended bool
}

func (t *heldTx) Exec(ctx context.Context, q string, args ...any) (Result, error) {
	return t.h.execQ(ctx, q, args)
}

func (t *heldTx) Query(ctx context.Context, q string, args ...any) (Rows, error) {
	return t.h.query(ctx, q, args)
}

func (t *heldTx) QueryRow(ctx context.Context, q string, args ...any) Row {
	rows, err := t.h.query(ctx, q, args)
	if err != nil {
		return errRow{err}
	}
	return &driverRow{rows: rows}
}

// Commit commits; a COMMIT that fails is followed by a ROLLBACK, so that
// the connection is left outside any transaction either way.
func (t *heldTx) Commit(ctx context.Context) error {
	return t.end(ctx, "COMMIT")
}

func (t *heldTx) Rollback(ctx context.Context) error {
	return t.end(ctx, "ROLLBACK")
}

func (t *heldTx) end(ctx context.Context, how string) error {
	if t.ended {
		return sql.ErrTxDone
	}
	t.ended = true
	defer t.h.give()
	_, err := t.h.execQ(ctx, how, nil)
	if err != nil && how == "COMMIT" {
		// SQLite may have rolled back already (a full disk); then this
		// fails too, harmlessly.
		_, _ = t.h.execQ(context.WithoutCancel(ctx), "ROLLBACK", nil)
	}
	return err
}
