package transition

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/weftrun/weft/internal/dag"
	"github.com/weftrun/weft/internal/sqlstore/sqldb"
	"github.com/weftrun/weft/internal/sqlstore/sqltx"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// This file holds what operators do to tasks and steps: cancel and retry a
// task, retry or resolve a single step, and the reopening of the steps a
// failure had skipped.

// CancelTask cancels one task and its open steps and returns the fences of
// the steps that were running.
func (t *operatorTx) CancelTask(id int64, reason string) ([]store.Fence, error) {
	var st string
	if err := t.QueryRow(`SELECT state FROM tasks WHERE id = ?`, id).Scan(&st); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, fmt.Errorf("task %d: %w", id, store.ErrNotFound)
		}
		return nil, fmt.Errorf("cancel task %d: %w", id, err)
	}
	from := state.Task(st)
	if !state.CanTask(from, state.TaskCancelled) {
		return nil, store.Conflictf("task %d is %s and cannot be cancelled", id, from)
	}
	return t.EndTask(id, from, state.TaskCancelled, state.StepCancelled, reason)
}

// RetryTask moves one failed task back to running (see RetryTask).
func (t *operatorTx) RetryTask(id int64, taskReason, stepReason string) error {
	var st string
	err := t.QueryRow(`SELECT state FROM tasks WHERE id = ?`, id).Scan(&st)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("task %d: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("retry task %d: %w", id, err)
	}
	if state.Task(st) != state.TaskFailed {
		return store.Conflictf("task %d is %s, only failed tasks can be retried", id, st)
	}
	rows, err := t.Query(`SELECT `+opStepColumns+` FROM steps WHERE task_id = ? ORDER BY idx`, id)
	if err != nil {
		return fmt.Errorf("steps of task %d: %w", id, err)
	}
	steps, err := sqldb.Collect(rows, scanOpStep)
	if err != nil {
		return fmt.Errorf("steps of task %d: %w", id, err)
	}
	items := map[int][]int{} // batch step index -> its items' indexes
	for i, r := range steps {
		if r.batchOf >= 0 {
			// Items of a batch count among the dependencies of the
			// batch step's children.
			items[r.batchOf] = append(items[r.batchOf], i)
		}
	}
	if ok, err := t.MoveTask(id, state.TaskFailed, state.TaskRunning, taskReason, `finished_at = NULL, error = '', failed = 0`); err != nil {
		return err
	} else if !ok {
		// Another transaction moved it since it was read.
		return store.Conflictf("task %d is no longer failed, only failed tasks can be retried", id)
	}
	// Failed and expired steps start again; skipped ones wait for their
	// dependencies anew, with counts recomputed from the new states.
	var restarted []int
	for i := range steps {
		r := &steps[i]
		switch r.st {
		case state.StepFailed, state.StepExpired:
			to, err := t.Restart(id, *r, stepReason)
			if err != nil {
				return err
			}
			r.st = to
			restarted = append(restarted, i)
		case state.StepSkipped:
			if _, err := t.MoveStep(r.id, id, r.name, state.StepSkipped, state.StepPending, 0, stepReason, `finished_at = NULL`); err != nil {
				return err
			}
			r.st = state.StepPending
		}
	}
	remaining := 0
	for _, r := range steps {
		if !r.st.Terminal() {
			remaining++
		}
		if r.st != state.StepPending {
			continue
		}
		c := dependencyCounts(r.deps, items, func(i int) state.Step { return steps[i].st })
		if _, err := t.Exec(`UPDATE steps SET deps_ok = ?, deps_failed = ?, deps_skipped = ? WHERE id = ?`, c.Succeeded, c.Failed, c.Skipped, r.id); err != nil {
			return fmt.Errorf("reset dependency counts: %w", err)
		}
	}
	if _, err := t.Exec(`UPDATE tasks SET remaining = ? WHERE id = ?`, remaining, id); err != nil {
		return fmt.Errorf("reset task counts: %w", err)
	}
	// With the counts in place, a signal step waiting again takes a
	// signal the task kept, as it would have on its first wait.
	for _, i := range restarted {
		if err := t.TakeKeptSignal(id, steps[i]); err != nil {
			return err
		}
	}
	return nil
}

// Restart moves a failed or expired step back to the state its kind starts
// in, its attempts counted afresh, and returns that state. This is the one
// rule of every retry (of a task, of a step, one or in bulk): a signal step
// waits for its signal again, with a fresh timeout (a signal the task kept
// is taken later, by takeKeptSignal, once the caller's counts are in
// place); every other kind (plain, decision, batch, item and workflow
// steps, whatever their handler) is ready to be claimed, with a fresh ttl.
func (t *operatorTx) Restart(taskID int64, s opStep, reason string) (state.Step, error) {
	const clear = `attempt = 0, error = '', result = NULL, finished_at = NULL, `
	if s.kind == store.KindSignal {
		_, err := t.MoveStep(s.id, taskID, s.name, s.st, state.StepWaiting, 0, fmt.Sprintf("%s: waiting for signal %q", reason, s.signal),
			clear+`expires_at = NULL, run_at = `+signalDeadline, t.Now)
		return state.StepWaiting, err
	}
	var expires any
	if s.ttl > 0 {
		expires = t.Now + s.ttl
	}
	moved, err := t.MoveStep(s.id, taskID, s.name, s.st, state.StepReady, 0, reason,
		clear+`expires_at = ?, run_at = NULL, sort_key = ?`, expires, t.Now-int64(s.priority)*t.H.Aging)
	if moved {
		t.MadeReady(s.id)
	}
	return state.StepReady, err
}

// TakeKeptSignal hands a restarted signal step the oldest signal of its
// name that the task kept for want of a waiting step.
func (t *operatorTx) TakeKeptSignal(taskID int64, s opStep) error {
	if s.kind != store.KindSignal {
		return nil
	}
	return t.takeSignal(s.id, taskID, s.name, s.children, s.signal)
}

// opStep is what an operator action needs to know of each step of a task.
type opStep struct {
	id       int64
	name     string
	st       state.Step
	deps     []int
	children string
	priority int
	ttl      int64
	rule     dag.Rule
	batchOf  int // for a batch item, its batch step's index; else -1
	kind     string
	signal   string
}

// opStepColumns are the columns scanOpStep reads.
const opStepColumns = `id, name, state, deps, children, priority, ttl, trigger_rule, batch_of, kind, signal`

// OperandTask loads the task of a step and every step of it, in index
// order, and returns the index of the step.
func (t *operatorTx) OperandTask(stepID int64) (taskID int64, ts state.Task, steps []opStep, target int, err error) {
	var st string
	if err = t.QueryRow(`SELECT s.task_id, t.state FROM steps s JOIN tasks t ON t.id = s.task_id WHERE s.id = ?`, stepID).Scan(&taskID, &st); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return 0, "", nil, 0, fmt.Errorf("step %d: %w", stepID, store.ErrNotFound)
		}
		return 0, "", nil, 0, fmt.Errorf("step %d: %w", stepID, err)
	}
	rows, err := t.Query(`SELECT `+opStepColumns+` FROM steps WHERE task_id = ? ORDER BY idx`, taskID)
	if err != nil {
		return 0, "", nil, 0, fmt.Errorf("steps of task %d: %w", taskID, err)
	}
	steps, err = sqldb.Collect(rows, scanOpStep)
	if err != nil {
		return 0, "", nil, 0, fmt.Errorf("steps of task %d: %w", taskID, err)
	}
	target = -1
	for i, o := range steps {
		if o.id == stepID {
			target = i
		}
	}
	return taskID, state.Task(st), steps, target, nil
}

// scanOpStep reads opStepColumns.
func scanOpStep(r sqldb.Row) (opStep, error) {
	var o opStep
	var sst, deps, rule string
	var batchOf sql.NullInt64
	if err := r.Scan(&o.id, &o.name, &sst, &deps, &o.children, &o.priority, &o.ttl, &rule, &batchOf, &o.kind, &o.signal); err != nil {
		return o, err
	}
	o.st, o.deps, o.rule, o.batchOf = state.Step(sst), sqltx.ParseIdx(deps), dag.Rule(rule), -1
	if o.rule == "" {
		o.rule = dag.AllSuccess
	}
	if batchOf.Valid {
		o.batchOf = int(batchOf.Int64)
	}
	return o, nil
}

// Reopen applies move to a failed or expired step (making it ready or
// resolved), returns the steps skipped only because of it to pending,
// recomputes the dependency counts and the task's counters, makes ready what
// the change satisfied, and moves a failed task back to running (or to
// completed when nothing is left to run).
func (t *operatorTx) Reopen(taskID int64, ts state.Task, steps []opStep, target int, move func() error) error {
	if ts != state.TaskFailed && ts != state.TaskRunning && ts != state.TaskPending {
		return store.Conflictf("task %d is %s", taskID, ts)
	}
	children := make([][]int, len(steps))
	for i, s := range steps {
		for _, d := range s.deps {
			children[d] = append(children[d], i)
		}
	}
	// The skipped descendants of the target, less those that another
	// failure keeps skipped.
	reopened := map[int]bool{}
	queue := []int{target}
	for len(queue) > 0 {
		i := queue[0]
		queue = queue[1:]
		for _, c := range children[i] {
			if steps[c].st == state.StepSkipped && !reopened[c] {
				reopened[c] = true
				queue = append(queue, c)
			}
		}
	}
	for changed := true; changed; {
		changed = false
		for c := range reopened {
			for _, p := range steps[c].deps {
				ps := steps[p].st
				ok := p == target || reopened[p] || ps.Succeeded() || !ps.Terminal()
				if !ok {
					delete(reopened, c)
					changed = true
					break
				}
			}
		}
	}
	if err := move(); err != nil {
		return err
	}
	// Read the target's new state back rather than assume it.
	var newState string
	if err := t.QueryRow(`SELECT state FROM steps WHERE id = ?`, steps[target].id).Scan(&newState); err != nil {
		return fmt.Errorf("step %q of task %d: %w", steps[target].name, taskID, err)
	}
	steps[target].st = state.Step(newState)
	for c := range reopened {
		if _, err := t.MoveStep(steps[c].id, taskID, steps[c].name, state.StepSkipped, state.StepPending, 0,
			fmt.Sprintf("dependency %q reopened", steps[target].name), `finished_at = NULL`); err != nil {
			return err
		}
		steps[c].st = state.StepPending
	}
	items := map[int][]int{} // a batch step's index -> its items' indexes
	for i, s := range steps {
		if s.batchOf >= 0 {
			items[s.batchOf] = append(items[s.batchOf], i)
		}
	}
	var ready []int
	for i, s := range steps {
		if s.st != state.StepPending {
			continue
		}
		c := dependencyCounts(s.deps, items, func(i int) state.Step { return steps[i].st })
		if _, err := t.Exec(`UPDATE steps SET deps_ok = ?, deps_failed = ?, deps_skipped = ? WHERE id = ?`, c.Succeeded, c.Failed, c.Skipped, s.id); err != nil {
			return fmt.Errorf("reset dependency counts: %w", err)
		}
		if reopened[i] && dag.Decide(s.rule, c) == dag.Run {
			ready = append(ready, i)
		}
	}
	remaining, failed := 0, 0
	for _, s := range steps {
		if !s.st.Terminal() {
			remaining++
		}
		if s.st == state.StepFailed || s.st == state.StepExpired {
			failed++
		}
	}
	reason := fmt.Sprintf("step %q %s by an operator", steps[target].name, steps[target].st)
	clearErr := ""
	if failed == 0 {
		clearErr = ", error = ''"
	}
	if _, err := t.Exec(`UPDATE tasks SET remaining = ?, failed = ?`+clearErr+` WHERE id = ?`, remaining, failed, taskID); err != nil {
		return fmt.Errorf("reset task counts: %w", err)
	}
	if ts == state.TaskFailed && (remaining > 0 || failed == 0) {
		if _, err := t.MoveTask(taskID, state.TaskFailed, state.TaskRunning, reason, `finished_at = NULL`); err != nil {
			return err
		}
		ts = state.TaskRunning
	}
	if remaining == 0 && !ts.Terminal() {
		to := state.TaskCompleted
		if failed > 0 {
			to = state.TaskFailed
		}
		if _, err := t.MoveTask(taskID, ts, to, reason, `finished_at = ?`, t.Now); err != nil {
			return err
		}
	}
	for _, i := range ready {
		s := steps[i]
		if err := t.eligible(s.id, taskID, s.name, state.StepPending, false, s.priority, s.ttl, 0, "dependencies satisfied"); err != nil {
			return err
		}
	}
	return nil
}

// RetryStep makes failed or expired step id ready again.
func (t *operatorTx) RetryStep(id int64, reason string) error {
	taskID, ts, steps, target, err := t.OperandTask(id)
	if err != nil {
		return err
	}
	o := steps[target]
	if o.st != state.StepFailed && o.st != state.StepExpired {
		return store.Conflictf("step %q of task %d is %s, only failed or expired steps can be retried", o.name, taskID, o.st)
	}
	if err := t.Reopen(taskID, ts, steps, target, func() error {
		_, err := t.Restart(taskID, o, reason)
		return err
	}); err != nil {
		return err
	}
	return t.TakeKeptSignal(taskID, o)
}

// ResolveStep ends step id by an operator's hand; its dependents see
// result (none when empty).
func (t *operatorTx) ResolveStep(id int64, result json.RawMessage, reason string) error {
	var res any
	if len(result) > 0 {
		res = string(result)
	}
	taskID, ts, steps, target, err := t.OperandTask(id)
	if err != nil {
		return err
	}
	o := steps[target]
	switch o.st {
	case state.StepFailed, state.StepExpired:
		return t.Reopen(taskID, ts, steps, target, func() error {
			_, err := t.MoveStep(o.id, taskID, o.name, o.st, state.StepResolved, 0, reason,
				`result = ?, finished_at = ?, expires_at = NULL`, res, t.Now)
			return err
		})
	case state.StepPending, state.StepReady, state.StepWaiting:
		if ts.Terminal() {
			return store.Conflictf("task %d is %s", taskID, ts)
		}
		moved, err := t.MoveStep(o.id, taskID, o.name, o.st, state.StepResolved, 0, reason,
			`result = ?, finished_at = ?, expires_at = NULL, run_at = NULL`, res, t.Now)
		if err != nil {
			return err
		}
		if !moved {
			return store.Conflictf("step %q of task %d changed meanwhile", o.name, taskID)
		}
		return t.StepEnded(taskID, o.name, o.children, state.StepResolved, "")
	default:
		return store.Conflictf("step %q of task %d is %s and cannot be resolved", o.name, taskID, o.st)
	}
}

// LogOperator appends one entry to the operator log.
func (t *operatorTx) LogOperator(actor, action, subject, reason string) error {
	if _, err := t.Exec(`INSERT INTO operator_log (at, actor, action, subject, reason) VALUES (?, ?, ?, ?, ?)`,
		t.Now, actor, action, subject, reason); err != nil {
		return fmt.Errorf("operator log: %w", err)
	}
	return nil
}
