package transition

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/weftrun/weft/internal/sqlstore/sqldb"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// This file holds sub-workflows: starting a child task from a running step
// (a KindWorkflow step's outcome, or a Go handler's StartChild), the links
// between parent and child, what a child's end does to the step that waits
// for it, and the cancellation of a cancelled task's children.

// ChildLimit returns why starting a child from StepID would pass the
// limits of c, or "" when it would not; parent is the step's task.
func (t *submitTx) ChildLimit(stepID int64, c *store.ChildStart) (parent int64, depth int, msg string, err error) {
	err = t.QueryRow(`SELECT t.id, t.depth FROM steps s JOIN tasks t ON t.id = s.task_id WHERE s.id = ?`, stepID).Scan(&parent, &depth)
	if err != nil {
		return 0, 0, "", fmt.Errorf("parent of step %d: %w", stepID, err)
	}
	depth++
	if c.MaxDepth > 0 && depth > c.MaxDepth {
		return parent, depth, fmt.Sprintf("a child task would be at depth %d, more than limits.max_depth (%d)", depth, c.MaxDepth), nil
	}
	if c.MaxChildren > 0 {
		var n int
		if err := t.QueryRow(`SELECT count(*) FROM tasks WHERE parent_task_id = ?`, parent).Scan(&n); err != nil {
			return 0, 0, "", fmt.Errorf("children of task %d: %w", parent, err)
		}
		if n >= c.MaxChildren {
			return parent, depth, fmt.Sprintf("task %d already started %d child tasks, limits.max_children", parent, n), nil
		}
	}
	return parent, depth, "", nil
}

// InsertChild inserts a child task and links it to its parent task and
// step. A key that exists returns the existing task.
func (t *submitTx) InsertChild(parent, stepID int64, depth int, in store.TaskInsert) (store.InsertResult, error) {
	res, err := t.InsertTasks([]store.TaskInsert{in})
	if err != nil {
		return store.InsertResult{}, err
	}
	r := res[0]
	if r.Duplicate {
		return r, nil
	}
	if _, err := t.Exec(`UPDATE tasks SET parent_task_id = ?, parent_step_id = ?, depth = ?,
		root_task_id = (SELECT COALESCE(p.root_task_id, p.id) FROM tasks p WHERE p.id = ?) WHERE id = ?`, parent, stepID, depth, parent, r.Task.ID); err != nil {
		return store.InsertResult{}, fmt.Errorf("link child task %d to task %d: %w", r.Task.ID, parent, err)
	}
	r.Task.ParentTaskID, r.Task.Depth = parent, depth
	return r, nil
}

// startChild records the outcome that starts a KindWorkflow step's child:
// the step, still held under o's fence, waits for the child inserted in the
// same transaction. It reports false when the fence no longer holds, and a
// message when the limits refuse the child (the caller fails the step).
func (t *submitTx) startChild(o store.Outcome) (held bool, refused string, err error) {
	parent, depth, msg, err := t.ChildLimit(o.Fence.StepID, o.Child)
	if err != nil || msg != "" {
		return false, msg, err
	}
	var taskID int64
	var name string
	err = t.QueryRow(`UPDATE steps SET state = 'waiting', sub = '', error = '', run_at = NULL, expires_at = NULL,
		deadline = NULL, child_error = NULL WHERE id = ? AND state = 'running' AND attempt = ? AND lease_id = ? RETURNING task_id, name`,
		o.Fence.StepID, o.Fence.Attempt, o.Fence.LeaseID).Scan(&taskID, &name)
	if errors.Is(err, sql.ErrNoRows) {
		return false, "", nil
	}
	if err != nil {
		return false, "", fmt.Errorf("record the child start of step %d: %w", o.Fence.StepID, err)
	}
	child, err := t.InsertChild(parent, o.Fence.StepID, depth, o.Child.Task)
	if err != nil {
		return false, "", err
	}
	if child.Duplicate {
		// Its key names an existing task, which may have ended: waiting
		// for it could wait forever.
		return false, "", store.Refused(fmt.Errorf("child key %q of step %d names task %d already", o.Child.Task.IdempotencyKey, o.Fence.StepID, child.Task.ID))
	}
	if _, err := t.Exec(`UPDATE steps SET child_task_id = ? WHERE id = ?`, child.Task.ID, o.Fence.StepID); err != nil {
		return false, "", fmt.Errorf("record child task %d of step %d: %w", child.Task.ID, o.Fence.StepID, err)
	}
	t.AuditRunEnd(o.Fence.StepID, taskID, name, state.StepWaiting, o.Fence.Attempt,
		fmt.Sprintf("waiting for child task %d", child.Task.ID))
	return true, "", nil
}

// childEnded carries a child task's end to the step that waits for it: a
// completed child completes the step with its result; any other end makes
// the step ready again with the reason, for its next attempt to report
// under its retry policy. A step that no longer waits for this child (it
// was cancelled, resolved, or started another) is left alone.
func (t *submitTx) childEnded(child, stepID int64, to state.Task, reason string) error {
	var taskID int64
	var name, children, st string
	var waitsFor sql.NullInt64
	var attempt, priority int
	err := t.QueryRow(`SELECT task_id, name, children, state, child_task_id, attempt, priority FROM steps WHERE id = ?`, stepID).
		Scan(&taskID, &name, &children, &st, &waitsFor, &attempt, &priority)
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("parent step %d of task %d: %w", stepID, child, err)
	}
	if state.Step(st) != state.StepWaiting || waitsFor.Int64 != child {
		return nil
	}
	if to == state.TaskCompleted {
		result, err := t.taskResult(child)
		if err != nil {
			return err
		}
		moved, err := t.MoveStep(stepID, taskID, name, state.StepWaiting, state.StepCompleted, attempt,
			fmt.Sprintf("child task %d completed", child), `result = ?, error = '', finished_at = ?`, string(result), t.Now)
		if err != nil || !moved {
			return err
		}
		return t.StepEnded(taskID, name, children, state.StepCompleted, "")
	}
	msg := fmt.Sprintf("child task %d %s", child, to)
	if reason != "" {
		msg += ": " + reason
	}
	// The attempt that reports it is the attempt that started the child.
	moved, err := t.MoveStep(stepID, taskID, name, state.StepWaiting, state.StepReady, attempt, msg,
		`child_error = ?, sort_key = ?, run_at = NULL, attempt = attempt - 1`, msg, t.Now-int64(priority)*t.H.Aging)
	if moved {
		t.Readied++
	}
	return err
}

// taskResult is what a completed task hands to the step that started it:
// the results of its final steps (those no other step depends on, batch
// items aside) that completed or were resolved, by step name.
func (t *submitTx) taskResult(id int64) (json.RawMessage, error) {
	rows, err := t.Query(TaskResultQuery, id)
	return DecodeTaskResult(id, rows, err)
}

const TaskResultQuery = `SELECT name, result FROM steps WHERE task_id = ? AND children = '' AND kind != 'item'
	AND state IN ('completed', 'resolved') ORDER BY idx`

func DecodeTaskResult(id int64, rows sqldb.Rows, err error) (json.RawMessage, error) {
	if err != nil {
		return nil, fmt.Errorf("result of task %d: %w", id, err)
	}
	type named struct {
		name   string
		result sql.NullString
	}
	steps, err := sqldb.Collect(rows, func(r sqldb.Row) (named, error) {
		var n named
		err := r.Scan(&n.name, &n.result)
		return n, err
	})
	if err != nil {
		return nil, fmt.Errorf("result of task %d: %w", id, err)
	}
	out := make(map[string]json.RawMessage, len(steps))
	for _, s := range steps {
		out[s.name] = json.RawMessage("null")
		if s.result.Valid {
			out[s.name] = json.RawMessage(s.result.String)
		}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("result of task %d: %w", id, err)
	}
	return b, nil
}

// cancelChildren cancels the unfinished children of a task that ended
// without finishing its work, and theirs in turn, returning the fences of
// their running steps.
func (t *submitTx) cancelChildren(parent int64, reason string) ([]store.Fence, error) {
	rows, err := t.Query(`SELECT id, state FROM tasks WHERE parent_task_id = ? AND state IN ('pending', 'running') ORDER BY id`, parent)
	if err != nil {
		return nil, fmt.Errorf("children of task %d: %w", parent, err)
	}
	type open struct {
		id int64
		st string
	}
	kids, err := sqldb.Collect(rows, func(r sqldb.Row) (open, error) {
		var o open
		err := r.Scan(&o.id, &o.st)
		return o, err
	})
	if err != nil {
		return nil, fmt.Errorf("children of task %d: %w", parent, err)
	}
	var running []store.Fence
	for _, k := range kids {
		fences, err := t.EndTask(k.id, state.Task(k.st), state.TaskCancelled, state.StepCancelled,
			fmt.Sprintf("parent task %d %s", parent, reason))
		if err != nil {
			return nil, err
		}
		running = append(running, fences...)
	}
	return running, nil
}
