package sqlstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/weftrun/weft/internal/sqlstore/sqldb"
	"github.com/weftrun/weft/state"
)

// This file holds the transaction every operation writes through: Tx,
// with its statements and the guarded state changes of tasks and steps.

// Tx is one write transaction with the helpers every state change uses:
// its statements, the audit log, the steps it made ready and the guarded
// state changes of tasks and steps.
type Tx struct {
	ctx     context.Context
	x       sqldb.Querier
	owned   bool // the store began the transaction (not the caller)
	h       *Handle
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
	// notifyDeferred: steps became ready but the notification is left to
	// the end of the current window.
	notifyDeferred bool
	// notifyTaken: this transaction opened a window and carries its
	// notification.
	notifyTaken bool
	// audits are written in bulk before the transaction commits.
	audits []auditRow
	// endedTask: the transaction ended a task (TaskEnded).
	endedTask bool
}

// soon runs a statement whose result nobody reads: where the transaction
// pipelines (sqldb.Pipeliner), ahead of its next statement, in that statement's
// round trip; else now. what says what it does, for its error.
func (t *Tx) soon(what, q string, args ...any) error {
	if p, ok := t.x.(sqldb.Pipeliner); ok {
		p.Queue(sqldb.Statement{Query: t.h.bind(q), Args: args, What: what})
		return nil
	}
	if _, err := t.exec(q, args...); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

func (t *Tx) exec(q string, args ...any) (sqldb.Result, error) {
	return t.x.Exec(t.ctx, t.h.bind(q), args...)
}

func (t *Tx) query(q string, args ...any) (sqldb.Rows, error) {
	return t.x.Query(t.ctx, t.h.bind(q), args...)
}

func (t *Tx) queryRow(q string, args ...any) sqldb.Row {
	return t.x.QueryRow(t.ctx, t.h.bind(q), args...)
}

// int64s runs a query of one integer column.
func (t *Tx) int64s(q string, args ...any) ([]int64, error) {
	rows, err := t.query(q, args...)
	if err != nil {
		return nil, err
	}
	return sqldb.Collect(rows, sqldb.Int64)
}

// strings runs a query of one text column.
func (t *Tx) strings(q string, args ...any) ([]string, error) {
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
func (t *Tx) idIn(col string, ids []int64) (string, []any) { return valuesIn(t.h, col, ids, "bigint") }

func (s *Handle) idIn(col string, ids []int64) (string, []any) {
	return valuesIn(s, col, ids, "bigint")
}

// textIn is idIn for text values.
func (t *Tx) textIn(col string, vals []string) (string, []any) {
	return valuesIn(t.h, col, vals, "text")
}

// valuesIn is the condition "col is one of vals" as one parameter: an array
// of the SQL type pgType, or a JSON array (or, of one value, that value).
func valuesIn[T int64 | string](s *Handle, col string, vals []T, pgType string) (string, []any) {
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
func (t *Tx) leftReady() bool { return t.readied > t.tookReady }

// madeReady counts a step this transaction made ready.
func (t *Tx) madeReady(id int64) {
	t.readied++
	if t.trackReady {
		t.readyIDs = append(t.readyIDs, id)
	}
}

// moveStep changes one step's state with a compare-and-swap on from, after
// checking the edge against the state machine, and records it. set adds
// column assignments. It reports whether the row matched.
func (t *Tx) moveStep(id, taskID int64, name string, from, to state.Step, attempt int, reason, set string, args ...any) (bool, error) {
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
func (t *Tx) moveLockedStep(id, taskID int64, name string, from, to state.Step, attempt int, reason, set string, args ...any) error {
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
func (t *Tx) moveTask(id int64, from, to state.Task, reason, set string, args ...any) (bool, error) {
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
	if to == state.TaskRunning && t.h.d.LimitRoom() != "" {
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
