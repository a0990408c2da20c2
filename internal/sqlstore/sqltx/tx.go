package sqltx

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
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
	Ctx   context.Context
	X     sqldb.Querier
	Owned bool // the store began the transaction (not the caller)
	// Work is what the store began the transaction for: a DB with
	// connections for each work (sqldb.WorkBeginner) began it on those,
	// and a claim runs only in work that claims (sqldb.Work.Claiming).
	Work    sqldb.Work
	H       *Handle
	Now     int64
	Engine  string
	Readied int
	// ReadyIDs: where TrackReady is set, the steps this transaction made
	// ready that it knows of by id; TookReady: how many of those it made
	// ready a claim in it took (CompleteAndClaim, InsertAndClaim). It
	// wakes the engines only for the others: a breaker that closes, say,
	// counts in readied after the claim (flushBreakers).
	TrackReady bool
	ReadyIDs   []int64
	TookReady  int
	// Timed: this transaction wrote a time something falls due (a delayed
	// step, a ttl, a good_until, a schedule's next tick). Engines are told
	// (DueWake, and the notification's payload NotifyDue), so that they
	// read their next due time again: a writer that runs no engine does
	// not otherwise reach them.
	Timed bool
	// NotifyDeferred: steps became ready but the notification is left to
	// the end of the current window.
	NotifyDeferred bool
	// NotifyTaken: this transaction opened a window and carries its
	// notification.
	NotifyTaken bool
	// Audits are written in bulk before the transaction commits.
	Audits []auditRow
	// EndedTask: the transaction ended a task (TaskEnded).
	EndedTask bool
}

// Soon runs a statement whose result nobody reads: where the transaction
// pipelines (sqldb.Pipeliner), ahead of its next statement, in that statement's
// round trip; else now. what says what it does, for its error.
func (t *Tx) Soon(what, q string, args ...any) error {
	if p, ok := t.X.(sqldb.Pipeliner); ok {
		p.Queue(sqldb.Statement{Query: t.H.Bind(q), Args: args, What: what})
		return nil
	}
	if _, err := t.Exec(q, args...); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

func (t *Tx) Exec(q string, args ...any) (sqldb.Result, error) {
	return t.X.Exec(t.Ctx, t.H.Bind(q), args...)
}

func (t *Tx) Query(q string, args ...any) (sqldb.Rows, error) {
	return t.X.Query(t.Ctx, t.H.Bind(q), args...)
}

func (t *Tx) QueryRow(q string, args ...any) sqldb.Row {
	return t.X.QueryRow(t.Ctx, t.H.Bind(q), args...)
}

// Int64s runs a query of one integer column.
func (t *Tx) Int64s(q string, args ...any) ([]int64, error) {
	rows, err := t.Query(q, args...)
	if err != nil {
		return nil, err
	}
	return sqldb.Collect(rows, sqldb.Int64)
}

// Strings runs a query of one text column.
func (t *Tx) Strings(q string, args ...any) ([]string, error) {
	rows, err := t.Query(q, args...)
	if err != nil {
		return nil, err
	}
	return sqldb.Collect(rows, sqldb.String)
}

// IDIn is the condition "col is one of ids" and its arguments, as one
// parameter whatever the number of ids (an array where the database takes
// arrays, a JSON array elsewhere), so that the statement's text is the
// same for every count: the database prepares and plans it once per
// connection, not once per size.
func (t *Tx) IDIn(col string, ids []int64) (string, []any) { return valuesIn(t.H, col, ids, "bigint") }

func (s *Handle) IDIn(col string, ids []int64) (string, []any) {
	return valuesIn(s, col, ids, "bigint")
}

// TextIn is IDIn for text values.
func (t *Tx) TextIn(col string, vals []string) (string, []any) {
	return valuesIn(t.H, col, vals, "text")
}

func (s *Handle) TextIn(col string, vals []string) (string, []any) {
	return valuesIn(s, col, vals, "text")
}

// valuesIn is the condition "col is one of vals" as one parameter: an array
// of the SQL type pgType, or a JSON array (or, of one value, that value).
func valuesIn[T int64 | string](s *Handle, col string, vals []T, pgType string) (string, []any) {
	if s.Dialect.Arrays() {
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

// Placeholders returns n comma-separated placeholders, for an IN list.
func Placeholders(n int) string {
	if n <= 0 {
		return "NULL"
	}
	return strings.Repeat("?, ", n-1) + "?"
}

// LeftReady reports whether this transaction made steps ready that a
// claim in it did not take: the engines are woken for those.
func (t *Tx) LeftReady() bool { return t.Readied > t.TookReady }

// MadeReady counts a step this transaction made ready.
func (t *Tx) MadeReady(id int64) {
	t.Readied++
	if t.TrackReady {
		t.ReadyIDs = append(t.ReadyIDs, id)
	}
}

// Unready takes back MadeReady for a step this transaction made ready and
// then moved on (a durable function's step that resumed).
func (t *Tx) Unready(id int64) {
	t.Readied--
	if i := slices.Index(t.ReadyIDs, id); i >= 0 {
		t.ReadyIDs = slices.Delete(t.ReadyIDs, i, i+1)
	}
}

// MoveStep changes one step's state with a compare-and-swap on from, after
// checking the edge against the state machine, and records it. set adds
// column assignments. It reports whether the row matched.
func (t *Tx) MoveStep(id, taskID int64, name string, from, to state.Step, attempt int, reason, set string, args ...any) (bool, error) {
	q, qargs, err := stepMove(id, taskID, name, from, to, set, args)
	if err != nil {
		return false, err
	}
	res, err := t.Exec(q, qargs...)
	if err != nil {
		return false, fmt.Errorf("step %q of task %d %s -> %s: %w", name, taskID, from, to, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return false, nil
	}
	t.auditMove(id, taskID, name, from, to, attempt, reason)
	return true, nil
}

// MoveLockedStep is MoveStep for a step whose row this transaction holds
// locked in state from: the change cannot miss, so nothing waits for it
// (soon).
func (t *Tx) MoveLockedStep(id, taskID int64, name string, from, to state.Step, attempt int, reason, set string, args ...any) error {
	q, qargs, err := stepMove(id, taskID, name, from, to, set, args)
	if err != nil {
		return err
	}
	if err := t.Soon(fmt.Sprintf("step %q of task %d %s -> %s", name, taskID, from, to), q, qargs...); err != nil {
		return err
	}
	t.auditMove(id, taskID, name, from, to, attempt, reason)
	return nil
}

// stepMove is the statement of MoveStep, once the edge is checked.
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

// MoveTask changes a task's state with a compare-and-swap and records it.
func (t *Tx) MoveTask(id int64, from, to state.Task, reason, set string, args ...any) (bool, error) {
	if err := state.CheckTask(from, to); err != nil {
		return false, fmt.Errorf("task %d: %w", id, err)
	}
	q := `UPDATE tasks SET state = ?`
	if set != "" {
		q += ", " + set
	}
	q += ` WHERE id = ? AND state = ?`
	res, err := t.Exec(q, append(append([]any{string(to)}, args...), id, string(from))...)
	if err != nil {
		return false, fmt.Errorf("task %d %s -> %s: %w", id, from, to, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return false, nil
	}
	if to == state.TaskRunning && t.H.Dialect.LimitRoom() != "" {
		// Back to running under a workflow limit: its namespace's total of
		// tasks grows, as a claim's start does (limitbounds.go).
		if _, err := t.Exec(`INSERT INTO limit_claims AS l (namespace, steps, tasks)
			SELECT namespace, 0, 1 FROM tasks WHERE id = ? AND limit_key != ''
			ON CONFLICT (namespace) DO UPDATE SET tasks = l.tasks + 1`, id); err != nil {
			return false, fmt.Errorf("task %d: count its return to running: %w", id, err)
		}
	}
	t.Audit(id, "", string(from), string(to), 0, reason)
	return true, nil
}

// Lock takes one transaction-scoped lock, waiting for it, where the
// dialect has locks; with one writer at a time there is nothing to take.
func (t *Tx) Lock(name string) error {
	if t.H.Dialect.Lock() == "" {
		return nil
	}
	if _, err := t.Exec(`SELECT `+t.H.Dialect.Lock(), name); err != nil {
		return fmt.Errorf("lock %s: %w", name, err)
	}
	return nil
}

// SortedKeys returns a map's keys in order, so that statements built from
// it are the same for the same map.
func SortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
