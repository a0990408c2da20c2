package sqlstore

import (
	"encoding/json"
	"fmt"
	"sort"

	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// plainOutcome reports whether an outcome only ends its step: completed or
// failed, with no decision to apply and no items to spawn. A batch of those
// is recorded with a few set-based statements instead of a few per step.
func plainOutcome(o store.Outcome) bool {
	return (o.State == state.StepCompleted || o.State == state.StepFailed) && !o.Decide && o.Spawn == nil
}

// finishMany records plain outcomes in one fenced update and accounts for
// their tasks together. It reports which outcomes still held their fence.
func (t *txn) finishMany(os []store.Outcome) ([]bool, error) {
	held := make([]bool, len(os))
	if len(os) == 0 {
		return held, nil
	}
	rows := make([][]any, len(os))
	byStep := make(map[int64]int, len(os))
	for i, o := range os {
		var result json.RawMessage
		if len(o.Result) > 0 {
			result = o.Result
		}
		rows[i] = []any{o.Fence.StepID, int64(o.Fence.Attempt), o.Fence.LeaseID, string(o.State), result, o.Error}
		byStep[o.Fence.StepID] = i
	}
	from, args := t.rowset("o", []column{{"o_id", colInt}, {"o_attempt", colInt}, {"o_lease", colInt},
		{"o_state", colText}, {"o_result", colJSON}, {"o_error", colText}}, rows)
	// The fence: each step must still be running under exactly its attempt
	// and lease.
	q, err := t.query(`UPDATE steps SET state = o.o_state, sub = '', result = o.o_result, error = o.o_error, finished_at = ?
		FROM `+from+`
		WHERE steps.id = o.o_id AND steps.state = 'running' AND steps.attempt = o.o_attempt AND steps.lease_id = o.o_lease
		RETURNING id, task_id, name, children`, append([]any{t.now}, args...)...)
	if err != nil {
		return nil, fmt.Errorf("record outcomes: %w", err)
	}
	var ended []endedStep
	for q.Next() {
		var id int64
		var e endedStep
		if err := q.Scan(&id, &e.taskID, &e.name, &e.children); err != nil {
			q.Close()
			return nil, fmt.Errorf("record outcomes: %w", err)
		}
		i := byStep[id]
		held[i] = true
		e.st, e.err = os[i].State, os[i].Error
		ended = append(ended, e)
		reason := os[i].Reason
		if reason == "" {
			reason = os[i].Error
		}
		t.audit(e.taskID, e.name, string(state.StepRunning), string(e.st), os[i].Fence.Attempt, reason)
	}
	q.Close()
	if err := q.Err(); err != nil {
		return nil, fmt.Errorf("record outcomes: %w", err)
	}
	return held, t.stepsEnded(ended)
}

// endedStep is a step that reached a terminal state: its task accounts for
// it and its children learn of it.
type endedStep struct {
	taskID         int64
	name, children string
	st             state.Step
	err            string
}

// stepEnded accounts for one step that reached a terminal state.
func (t *txn) stepEnded(taskID int64, name string, children string, st state.Step, errMsg string) error {
	return t.stepsEnded([]endedStep{{taskID: taskID, name: name, children: children, st: st, err: errMsg}})
}

// stepsEnded accounts for steps that reached a terminal state: each task's
// remaining and failed counts in one statement, the tasks whose steps have
// all ended finished in another, then the children of every step.
func (t *txn) stepsEnded(ended []endedStep) error {
	if len(ended) == 0 {
		return nil
	}
	type account struct {
		n, failed int64
		err       string
	}
	accounts := map[int64]*account{}
	var ids []int64
	for _, e := range ended {
		a := accounts[e.taskID]
		if a == nil {
			a = &account{}
			accounts[e.taskID] = a
			ids = append(ids, e.taskID)
		}
		a.n++
		if e.st == state.StepFailed || e.st == state.StepExpired {
			a.failed++
			if a.err == "" {
				a.err = fmt.Sprintf("step %q %s", e.name, e.st)
				if e.err != "" {
					a.err += ": " + e.err
				}
			}
		}
	}
	// Tasks in id order, so engines finishing steps of the same tasks take
	// their row locks in the same order.
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	rows := make([][]any, len(ids))
	for i, id := range ids {
		a := accounts[id]
		rows[i] = []any{id, a.n, a.failed, a.err}
	}
	if t.s.d.ClaimLock != "" && len(ids) > 1 {
		lockArgs := make([]any, len(ids))
		for i, id := range ids {
			lockArgs[i] = id
		}
		if _, err := t.exec(`SELECT id FROM tasks WHERE id IN (`+placeholders(len(ids))+`) ORDER BY id FOR UPDATE`, lockArgs...); err != nil {
			return fmt.Errorf("lock tasks: %w", err)
		}
	}
	from, args := t.rowset("a", []column{{"a_id", colInt}, {"a_n", colInt}, {"a_failed", colInt}, {"a_err", colText}}, rows)
	q, err := t.query(`UPDATE tasks SET remaining = remaining - a.a_n, failed = failed + a.a_failed,
		error = CASE WHEN error = '' THEN a.a_err ELSE error END
		FROM `+from+` WHERE tasks.id = a.a_id
		RETURNING id, remaining, failed, state, error`, args...)
	if err != nil {
		return fmt.Errorf("account ended steps: %w", err)
	}
	type done struct {
		id       int64
		from, to state.Task
		reason   string
	}
	var finished []done
	for q.Next() {
		var id int64
		var remaining, failed int
		var st, taskErr string
		if err := q.Scan(&id, &remaining, &failed, &st, &taskErr); err != nil {
			q.Close()
			return fmt.Errorf("account ended steps: %w", err)
		}
		if remaining != 0 || state.Task(st).Terminal() {
			continue
		}
		d := done{id: id, from: state.Task(st), to: state.TaskCompleted, reason: "every step finished"}
		if failed > 0 {
			d.to, d.reason = state.TaskFailed, taskErr
			if d.reason == "" {
				d.reason = "a step failed"
			}
		}
		if err := state.CheckTask(d.from, d.to); err != nil {
			q.Close()
			return fmt.Errorf("task %d: %w", id, err)
		}
		finished = append(finished, d)
	}
	q.Close()
	if err := q.Err(); err != nil {
		return fmt.Errorf("account ended steps: %w", err)
	}
	if len(finished) > 0 {
		rows := make([][]any, len(finished))
		reasons := make(map[int64]done, len(finished))
		for i, d := range finished {
			rows[i] = []any{d.id, string(d.from), string(d.to)}
			reasons[d.id] = d
		}
		from, args := t.rowset("f", []column{{"f_id", colInt}, {"f_from", colText}, {"f_to", colText}}, rows)
		moved, err := t.query(`UPDATE tasks SET state = f.f_to, finished_at = ? FROM `+from+`
			WHERE tasks.id = f.f_id AND tasks.state = f.f_from RETURNING id`, append([]any{t.now}, args...)...)
		if err != nil {
			return fmt.Errorf("finish tasks: %w", err)
		}
		for moved.Next() {
			var id int64
			if err := moved.Scan(&id); err != nil {
				moved.Close()
				return fmt.Errorf("finish tasks: %w", err)
			}
			d := reasons[id]
			t.audit(id, "", string(d.from), string(d.to), 0, d.reason)
		}
		moved.Close()
		if err := moved.Err(); err != nil {
			return fmt.Errorf("finish tasks: %w", err)
		}
	}
	for _, e := range ended {
		for _, child := range parseIdx(e.children) {
			if err := t.parentEnded(e.taskID, child, e.st, e.name); err != nil {
				return err
			}
		}
	}
	return nil
}
