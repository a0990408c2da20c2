package transition

import (
	"database/sql"
	"errors"
	"fmt"
	"strconv"

	"github.com/weftrun/weft/internal/sqlstore/sqltx"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// This file holds the calls of durable functions: a function step that
// made calls its task has not recorded waits for them as for dependencies
// (deps_extra), and each call becomes a step of the task with the function
// step as its child. The cascade (parentsEnded) makes the function step
// ready again once they have all ended.

// waitForCalls records the outcome of a function step that made calls: it
// waits, with its attempt given back and no run_at, for len(o.Calls) more
// dependencies, which it creates. False means its fence was stale.
func (t *outcomeTx) waitForCalls(o store.Outcome) (bool, error) {
	var fn callingStep
	err := t.QueryRow(`UPDATE steps SET state = 'waiting', sub = '', error = '', deadline = NULL, run_at = NULL, attempt = attempt - 1,
		deps_extra = deps_extra + ? WHERE id = ? AND state = 'running' AND attempt = ? AND lease_id = ? AND kind = ? `+callingStepReturning,
		len(o.Calls), o.Fence.StepID, o.Fence.Attempt, o.Fence.LeaseID, store.KindFunction).Scan(fn.dest()...)
	if err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return false, nil
		}
		return false, fmt.Errorf("record the calls of function step %d: %w", o.Fence.StepID, err)
	}
	t.AuditRunEnd(o.Fence.StepID, fn.taskID, fn.name, state.StepWaiting, o.Fence.Attempt, waitingFor(o.Reason, len(o.Calls)))
	return true, t.addCalls(fn, o.Calls)
}

// callingStep is what addCalls needs of the function step that makes
// calls, as an update of its row returns it (callingStepReturning).
type callingStep struct {
	taskID              int64
	name, namespace, wf string
	idx, prio           int
}

const callingStepReturning = `RETURNING task_id, name, idx, namespace, workflow, (SELECT priority FROM tasks WHERE tasks.id = steps.task_id)`

func (c *callingStep) dest() []any {
	return []any{&c.taskID, &c.name, &c.idx, &c.namespace, &c.wf, &c.prio}
}

// waitingFor is the reason a function step waits for n calls: the one
// given, or their count.
func waitingFor(reason string, n int) string {
	if reason == "" {
		return fmt.Sprintf("waiting for %d call(s)", n)
	}
	return reason
}

// addCalls creates the steps of calls after the task's last step, each
// with the function step fn as its only child.
func (t *outcomeTx) addCalls(fn callingStep, calls []store.StepInsert) error {
	var next int
	if err := t.QueryRow(`SELECT max(idx) + 1 FROM steps WHERE task_id = ?`, fn.taskID).Scan(&next); err != nil {
		return fmt.Errorf("calls of task %d: %w", fn.taskID, err)
	}
	children := strconv.Itoa(fn.idx)
	type signalWait struct {
		id int64
		c  store.StepInsert
	}
	var waits []signalWait
	for i, c := range calls {
		to, runAt := state.StepReady, any(nil)
		switch {
		case c.Kind == store.KindSignal:
			to = state.StepPending
		case !c.RunAt.IsZero() && c.RunAt.UnixMicro() > t.Now:
			to, runAt = state.StepWaiting, c.RunAt.UnixMicro()
		}
		p := fn.prio + c.Priority
		var item any
		if len(c.Item) > 0 {
			item = string(c.Item)
		}
		var id int64
		err := t.QueryRow(`INSERT INTO steps (task_id, idx, name, handler, namespace, state, deps, children, priority, sort_key, max_attempts,
			run_at, kind, item, signal, wait_timeout, run_timeout, preemptible, workflow)
			VALUES (?, ?, ?, ?, ?, ?, '', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id`,
			fn.taskID, next+i, c.Name, c.Handler, fn.namespace, string(to), children, p, t.Now-int64(p)*t.H.Aging, max(c.MaxAttempts, 1),
			runAt, c.Kind, item, c.Signal, c.SignalTimeout.Microseconds(), max(c.Timeout.Microseconds(), 0), sqltx.BoolInt(c.Preemptible), fn.wf).Scan(&id)
		if err != nil {
			return fmt.Errorf("create call %q of task %d: %w", c.Name, fn.taskID, err)
		}
		t.Audit(fn.taskID, c.Name, "", string(to), 0, "called by the function")
		switch to {
		case state.StepReady:
			t.MadeReady(id)
		case state.StepPending:
			waits = append(waits, signalWait{id, c})
		}
	}
	if _, err := t.Exec(`UPDATE tasks SET remaining = remaining + ? WHERE id = ?`, len(calls), fn.taskID); err != nil {
		return fmt.Errorf("count the calls of task %d: %w", fn.taskID, err)
	}
	// Signal waits begin last: one whose signal the task kept ends at
	// once, and may make the function step ready in this transaction.
	for _, w := range waits {
		if err := t.beginWait(w.id, fn.taskID, w.c.Name, children, w.c.Signal); err != nil {
			return err
		}
	}
	return nil
}

// resume records what the function of task taskID did next after a call
// whose end this transaction recorded (store.Resume): where that end made
// its function step ready and the task holds the calls the engine replayed
// over, the step waits again, for the new calls, without a run of its
// own. Otherwise it stays ready and runs as usual.
func (t *outcomeTx) resume(taskID, lease int64, r *store.Resume) error {
	if r.Returned {
		return t.functionReturned(taskID, lease, r)
	}
	if len(r.Calls) == 0 {
		return nil
	}
	var fn callingStep
	// The function step counts its calls (deps_extra) and, as the
	// cascade ends them, those that succeeded (deps_ok): the check reads
	// its row alone, however many calls the task made.
	err := t.QueryRow(`UPDATE steps SET state = 'waiting', run_at = NULL, deps_extra = deps_extra + ?
		WHERE id = ? AND task_id = ? AND state = 'ready' AND kind = ? AND deps_extra = ? AND deps_ok = ? `+callingStepReturning,
		len(r.Calls), r.StepID, taskID, store.KindFunction, r.Recorded, r.Succeeded).Scan(fn.dest()...)
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("resume the function of task %d: %w", taskID, err)
	}
	t.Unready(r.StepID)
	t.Audit(taskID, fn.name, string(state.StepReady), string(state.StepWaiting), 0, waitingFor(r.Reason, len(r.Calls)))
	return t.addCalls(fn, r.Calls)
}

// functionReturned completes the function step of task taskID, made ready
// by the call whose end this transaction recorded, with the result its
// function returned when the engine replayed it (store.Resume.Returned):
// a run of the step under the call's claim (its lease, its engine, now),
// claimed and ended in one. Where the task does not hold the calls
// replayed over, the step stays ready and runs as usual.
func (t *outcomeTx) functionReturned(taskID, lease int64, r *store.Resume) error {
	var result any
	if len(r.Result) > 0 {
		result = string(r.Result)
	}
	var name, children string
	var attempt int
	err := t.QueryRow(`UPDATE steps SET state = 'completed', sub = '', attempt = attempt + 1, lease_id = ?, engine_id = ?, claim_audited = 0,
			started_at = ?, finished_at = ?, deadline = NULL, run_at = NULL, error = '', result = ?
		WHERE id = ? AND task_id = ? AND state = 'ready' AND kind = ? AND deps_extra = ? AND deps_ok = ?
		RETURNING name, children, attempt`,
		lease, t.Engine, t.Now, t.Now, result, r.StepID, taskID, store.KindFunction, r.Recorded, r.Succeeded).Scan(&name, &children, &attempt)
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("complete the function of task %d: %w", taskID, err)
	}
	t.Unready(r.StepID)
	// The run's claim is read from the step's row as the audit is
	// written (claimOfRun): now, this attempt, this engine.
	t.AuditRunEnd(r.StepID, taskID, name, state.StepCompleted, attempt, "the function returned")
	return t.StepEnded(taskID, name, children, state.StepCompleted, "")
}
