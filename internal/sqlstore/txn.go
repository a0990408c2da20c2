package sqlstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/weftrun/weft/internal/sqlstore/sqldb"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// This file holds the transaction helper every operation writes through:
// txn, with the audit log and the guarded state changes of tasks and steps.

// txn is one write transaction with the helpers every state change uses: the
// audit log, the eligibility of steps and the cascade to children.
type txn struct {
	ctx     context.Context
	x       sqldb.Querier
	owned   bool // the store began the transaction (not the caller)
	s       *Store
	now     int64
	engine  string
	readied int
	// readyIDs: where trackReady is set, the steps this transaction made
	// ready that it knows of by id; tookReady: how many of those it made
	// ready a claim in it took (CompleteAndClaim, InsertAndClaim). It
	// wakes the engines only for the others: a breaker that closes, say,
	// counts in readied after the claim (flushBreakers).
	trackReady bool
	readyIDs   []int64
	tookReady  int
	// timed: this transaction wrote a time something falls due (a delayed
	// step, a ttl, a good_until, a schedule's next tick). Engines are told
	// (DueWake, and the notification's payload NotifyDue), so that they
	// read their next due time again: a writer that runs no engine does
	// not otherwise reach them.
	timed bool
	// started: the handlers' part of tasks started before, read in this
	// transaction (readTask).
	started map[int64]claimedTask
	// ran: the results of the runs this transaction recorded, by task
	// and index, as dependencies' results (ranHere).
	ran map[stepAt]depResult
	// notifyDeferred: steps became ready but the notification is left to
	// the end of the current window.
	notifyDeferred bool
	// notifyTaken: this transaction opened a window and carries its
	// notification.
	notifyTaken bool
	// audits are written in bulk before the transaction commits.
	audits []auditRow
	// stepArgs is the arguments buffer of insertTaskSteps' statements.
	stepArgs []any
	// breakers are outcomes of steps with a circuit breaker, applied
	// before the transaction commits (breakers.go).
	breakers breakerWork
	// endedTask: the transaction ended a task (TaskEnded).
	endedTask bool
	// claim is the claim made in this transaction, if any (claimer).
	claim claimTx

	outcomeTx
	submitTx
	operatorTx
}

// The operations of a transaction, by family: each a type of its own, whose
// methods a txn takes on (they are embedded, wired by newTxn).
type (
	// outcomeTx records outcomes and what they cascade to: complete.go,
	// cascade.go, breakeroutcomes.go, dynamic.go, claimed.go (the
	// results runs leave for the steps that depend on them).
	outcomeTx struct{ *txn }
	// submitTx inserts tasks and their steps: submit.go, submitbulk.go,
	// submitrows.go, supersede.go, children.go, tags.go.
	submitTx struct{ *txn }
	// operatorTx is what operators and engines change besides outcomes:
	// operator.go, signals.go, bulk.go, leases.go, workers.go,
	// retention.go, policies.go, limits.go (a named lock).
	operatorTx struct{ *txn }
)

// newTxn returns a transaction of s on x for engine, its operations wired
// to it.
func (s *Store) newTxn(ctx context.Context, x sqldb.Querier, engine string) *txn {
	t := &txn{ctx: ctx, x: x, s: s, now: s.clock().UnixMicro(), engine: engine}
	t.outcomeTx.txn, t.submitTx.txn, t.operatorTx.txn = t, t, t
	return t
}

// write runs fn in one write transaction (IMMEDIATE on SQLite).
func (s *Store) write(ctx context.Context, engineID string, fn func(t *txn) error) error {
	ctx, err := s.writeContext(ctx)
	if err != nil {
		return err
	}
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", s.writeErr(err))
	}
	t := s.newTxn(ctx, tx, engineID)
	t.owned = true
	ran := false
	defer func() {
		if !ran {
			// fn panicked (a bug, which an HTTP server recovers from):
			// the transaction rolls back, so that its connection (on
			// SQLite, the one writer) serves the next write, and the
			// panic goes on.
			tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	err = t.run(fn)
	ran = true
	if err != nil {
		err = s.writeErr(err)
		tx.Rollback(context.WithoutCancel(ctx))
		if t.notifyTaken {
			// The window's notification was to ride on this transaction;
			// send it when the window ends instead, for those that waited.
			s.scheduleNotify()
		}
		return err
	}
	if err = tx.Commit(ctx); err != nil {
		if t.notifyTaken {
			s.scheduleNotify()
		}
		return fmt.Errorf("commit: %w", s.writeErr(err))
	}
	s.woke(t)
	if t.notifyDeferred {
		s.scheduleNotify()
	}
	return nil
}

// contendedTries is how many times writeRetry runs a transaction that the
// database gives up for its clash with concurrent ones.
const contendedTries = 5

// writeRetry is write for a transaction that can run again from the start
// (fn keeps nothing outside the transaction but what it sets afresh): one
// the database gives up for its clash with concurrent transactions (a
// deadlock, a serialization failure) runs again, up to contendedTries
// times in all, after a short pause with jitter; then it is
// store.ErrContended.
func (s *Store) writeRetry(ctx context.Context, engineID string, fn func(t *txn) error) error {
	for try := 1; ; try++ {
		err := s.write(ctx, engineID, fn)
		if err == nil || !errors.Is(err, store.ErrContended) || try == contendedTries {
			return err
		}
		// 1-2 ms, then 2-4, 4-8, 8-16: the other transaction is short.
		pause := time.Duration(1<<(try-1)) * time.Millisecond
		pause += rand.N(pause)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(pause):
		}
	}
}

// writeContext is the context a write runs under (Dialect.WriteContext).
func (s *Store) writeContext(ctx context.Context) (context.Context, error) {
	return s.d.WriteContext(ctx)
}

// writeErr marks an error of a write as the dialect classifies it
// (sqldb.WriteErr).
func (s *Store) writeErr(err error) error { return sqldb.WriteErr(s.d, err) }

// within runs fn inside a transaction the caller began and will commit or
// roll back. Engines in this process are woken at once (they find the steps
// when the caller commits); other processes hear the notification, which
// PostgreSQL delivers only on commit.
func (s *Store) within(ctx context.Context, q sqldb.Querier, fn func(t *txn) error) error {
	t := s.newTxn(ctx, q, "")
	if err := t.run(fn); err != nil {
		return err
	}
	s.woke(t)
	return nil
}

// woke wakes this handle's engines for what transaction t did: steps made
// ready (Wake), a due time written (DueWake), a task ended (TaskEnded).
func (s *Store) woke(t *txn) {
	if t.leftReady() {
		s.notify()
	}
	if t.timed {
		s.NudgeDue()
	}
	if t.endedTask {
		s.ended.Fire()
	}
}

// run applies fn, writes the queued audit rows and, if steps became ready,
// the dialect's notification.
func (t *txn) run(fn func(t *txn) error) error {
	if err := fn(t); err != nil {
		return err
	}
	if err := t.flushBreakers(); err != nil {
		return err
	}
	if err := t.flushAudit(); err != nil {
		return err
	}
	if (t.leftReady() || t.timed) && t.s.notice.Statement != "" {
		switch {
		case t.timed:
			// Told at once: a window's later notification says nothing of
			// due times (transactions that write them are few).
		case t.owned:
			if !t.s.takeNotify() {
				t.notifyDeferred = true
				return nil
			}
			t.notifyTaken = true
		}
		// Nothing reads it: it goes with the COMMIT where it can.
		if err := t.soon("notify", t.s.notice.Statement, t.s.notice.Channel, t.s.notifyPayload(t.timed, t.owned)); err != nil {
			return err
		}
	}
	return nil
}

// soon runs a statement whose result nobody reads: where the transaction
// pipelines (sqldb.Pipeliner), ahead of its next statement, in that statement's
// round trip; else now. what says what it does, for its error.
func (t *txn) soon(what, q string, args ...any) error {
	if p, ok := t.x.(sqldb.Pipeliner); ok {
		p.Queue(sqldb.Statement{Query: t.s.bind(q), Args: args, What: what})
		return nil
	}
	if _, err := t.exec(q, args...); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

func (t *txn) exec(q string, args ...any) (sqldb.Result, error) {
	return t.x.Exec(t.ctx, t.s.bind(q), args...)
}

func (t *txn) query(q string, args ...any) (sqldb.Rows, error) {
	return t.x.Query(t.ctx, t.s.bind(q), args...)
}

func (t *txn) queryRow(q string, args ...any) sqldb.Row {
	return t.x.QueryRow(t.ctx, t.s.bind(q), args...)
}

// int64s runs a query of one integer column.
func (t *txn) int64s(q string, args ...any) ([]int64, error) {
	rows, err := t.query(q, args...)
	if err != nil {
		return nil, err
	}
	return sqldb.Collect(rows, sqldb.Int64)
}

// strings runs a query of one text column.
func (t *txn) strings(q string, args ...any) ([]string, error) {
	rows, err := t.query(q, args...)
	if err != nil {
		return nil, err
	}
	return sqldb.Collect(rows, sqldb.String)
}

// idIn is the condition "col is one of ids" and its arguments, as one
// parameter whatever the number of ids (an array where the database takes
// arrays, a JSON array elsewhere), so that the statement's text is the
// same for every count: the database prepares and plans it once per
// connection, not once per size.
func (t *txn) idIn(col string, ids []int64) (string, []any) { return valuesIn(t.s, col, ids, "bigint") }

func (s *Store) idIn(col string, ids []int64) (string, []any) { return valuesIn(s, col, ids, "bigint") }

// textIn is idIn for text values.
func (t *txn) textIn(col string, vals []string) (string, []any) {
	return valuesIn(t.s, col, vals, "text")
}

// valuesIn is the condition "col is one of vals" as one parameter: an array
// of the SQL type pgType, or a JSON array (or, of one value, that value).
func valuesIn[T int64 | string](s *Store, col string, vals []T, pgType string) (string, []any) {
	if s.d.Arrays() {
		return col + " = ANY(?::" + pgType + "[])", []any{vals}
	}
	if len(vals) == 1 {
		// One value is the common case of a DAG's claims and outcomes:
		// SQLite looks it up without reading a JSON array.
		return col + " = ?", []any{vals[0]}
	}
	b, _ := json.Marshal(vals) // integers and strings always encode
	return col + " IN (SELECT value FROM json_each(?))", []any{string(b)}
}

// placeholders returns n comma-separated placeholders, for an IN list.
func placeholders(n int) string {
	if n <= 0 {
		return "NULL"
	}
	return strings.Repeat("?, ", n-1) + "?"
}

// leftReady reports whether this transaction made steps ready that a
// claim in it did not take: the engines are woken for those.
func (t *txn) leftReady() bool { return t.readied > t.tookReady }

// madeReady counts a step this transaction made ready.
func (t *txn) madeReady(id int64) {
	t.readied++
	if t.trackReady {
		t.readyIDs = append(t.readyIDs, id)
	}
}

// moveStep changes one step's state with a compare-and-swap on from, after
// checking the edge against the state machine, and records it. set adds
// column assignments. It reports whether the row matched.
func (t *txn) moveStep(id, taskID int64, name string, from, to state.Step, attempt int, reason, set string, args ...any) (bool, error) {
	q, qargs, err := stepMove(id, taskID, name, from, to, set, args)
	if err != nil {
		return false, err
	}
	res, err := t.exec(q, qargs...)
	if err != nil {
		return false, fmt.Errorf("step %q of task %d %s -> %s: %w", name, taskID, from, to, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return false, nil
	}
	t.auditMove(id, taskID, name, from, to, attempt, reason)
	return true, nil
}

// moveLockedStep is moveStep for a step whose row this transaction holds
// locked in state from: the change cannot miss, so nothing waits for it
// (soon).
func (t *txn) moveLockedStep(id, taskID int64, name string, from, to state.Step, attempt int, reason, set string, args ...any) error {
	q, qargs, err := stepMove(id, taskID, name, from, to, set, args)
	if err != nil {
		return err
	}
	if err := t.soon(fmt.Sprintf("step %q of task %d %s -> %s", name, taskID, from, to), q, qargs...); err != nil {
		return err
	}
	t.auditMove(id, taskID, name, from, to, attempt, reason)
	return nil
}

// stepMove is the statement of moveStep, once the edge is checked.
func stepMove(id, taskID int64, name string, from, to state.Step, set string, args []any) (string, []any, error) {
	if err := state.CheckStep(from, to); err != nil {
		return "", nil, fmt.Errorf("step %q of task %d: %w", name, taskID, err)
	}
	q := `UPDATE steps SET state = ?`
	if set != "" {
		q += ", " + set
	}
	q += ` WHERE id = ? AND state = ?`
	return q, append(append([]any{string(to)}, args...), id, string(from)), nil
}

// moveTask changes a task's state with a compare-and-swap and records it.
func (t *txn) moveTask(id int64, from, to state.Task, reason, set string, args ...any) (bool, error) {
	if err := state.CheckTask(from, to); err != nil {
		return false, fmt.Errorf("task %d: %w", id, err)
	}
	q := `UPDATE tasks SET state = ?`
	if set != "" {
		q += ", " + set
	}
	q += ` WHERE id = ? AND state = ?`
	res, err := t.exec(q, append(append([]any{string(to)}, args...), id, string(from))...)
	if err != nil {
		return false, fmt.Errorf("task %d %s -> %s: %w", id, from, to, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return false, nil
	}
	if to == state.TaskRunning && t.s.d.LimitRoom() != "" {
		// Back to running under a workflow limit: its namespace's total of
		// tasks grows, as a claim's start does (limitbounds.go).
		if _, err := t.exec(`INSERT INTO limit_claims AS l (namespace, steps, tasks)
			SELECT namespace, 0, 1 FROM tasks WHERE id = ? AND limit_key != ''
			ON CONFLICT (namespace) DO UPDATE SET tasks = l.tasks + 1`, id); err != nil {
			return false, fmt.Errorf("task %d: count its return to running: %w", id, err)
		}
	}
	t.audit(id, "", string(from), string(to), 0, reason)
	return true, nil
}
