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

// This file holds durable waits for signals. A signal step waits in state
// waiting with its signal's name in steps.signal and its deadline in
// run_at (NULL: no deadline): it holds no slot and no goroutine. Signals
// are rows of the signals table; one that arrives before its wait begins is
// kept (step_id NULL) until a wait takes it.

// signalDeadline is the run_at of a signal step's wait that begins at
// its parameter (the transaction's time): its wait_timeout later, or NULL
// for none.
const signalDeadline = `CASE WHEN wait_timeout > 0 THEN ? + wait_timeout END`

// TouchTask writes the row of task id and returns its state (ErrNotFound
// if there is none). Every transaction that begins a wait of a task or
// sends a signal to it writes the row before it looks for the other, so
// that the later of two such sees the earlier: a signal is never kept
// while a step waits for it.
func (t *operatorTx) TouchTask(id int64) (state.Task, error) {
	var st string
	err := t.QueryRow(`UPDATE tasks SET remaining = remaining WHERE id = ? RETURNING state`, id).Scan(&st)
	if errors.Is(err, sql.ErrNoRows) {
		return "", fmt.Errorf("task %d: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("write task %d: %w", id, err)
	}
	return state.Task(st), nil
}

// signalResult is the result of a step completed by a signal.
func signalResult(name string, payload string) (string, error) {
	b, err := json.Marshal(struct {
		Signal  string          `json:"signal"`
		Payload json.RawMessage `json:"payload"`
	}{name, json.RawMessage(payload)})
	return string(b), err
}

// waitClaimed records the outcome of a claimed signal step
// (Outcome.BeginWait): the step waits for its signal, with its attempt
// given back and its signal timeout from now as its deadline, and a signal
// its task kept completes it at once. It reports false if the fence is
// stale.
func (t *outcomeTx) waitClaimed(o store.Outcome) (bool, error) {
	var taskID int64
	var name, children, signal string
	err := t.QueryRow(`UPDATE steps SET state = 'waiting', deadline = NULL, sub = '', error = '', attempt = attempt - 1,
		run_at = `+signalDeadline+`
		WHERE id = ? AND state = 'running' AND attempt = ? AND lease_id = ? AND kind = 'signal'
		RETURNING task_id, name, children, signal`, t.Now, o.Fence.StepID, o.Fence.Attempt, o.Fence.LeaseID).
		Scan(&taskID, &name, &children, &signal)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("begin the signal wait of step %d: %w", o.Fence.StepID, err)
	}
	t.AuditRunEnd(o.Fence.StepID, taskID, name, state.StepWaiting, o.Fence.Attempt, fmt.Sprintf("waiting for signal %q", signal))
	if _, err := t.TouchTask(taskID); err != nil {
		return false, err
	}
	return true, t.takeSignal(o.Fence.StepID, taskID, name, children, signal)
}

// beginWait moves a pending signal step, a durable function's call, to
// waiting and, if a signal of its name is kept for the task, completes it
// with that signal at once. Its transaction wrote the task's row (the
// call's count).
func (t *operatorTx) beginWait(id, taskID int64, name, children, signal string) error {
	moved, err := t.MoveStep(id, taskID, name, state.StepPending, state.StepWaiting, 0, fmt.Sprintf("waiting for signal %q", signal),
		`run_at = `+signalDeadline, t.Now)
	if err != nil || !moved {
		return err
	}
	return t.takeSignal(id, taskID, name, children, signal)
}

// takeSignal completes the waiting step id with the oldest signal of its
// name that the task kept, if any.
func (t *operatorTx) takeSignal(id, taskID int64, name, children, signal string) error {
	var sigID int64
	var payload string
	err := t.QueryRow(`SELECT id, payload FROM signals WHERE task_id = ? AND name = ? AND step_id IS NULL ORDER BY id LIMIT 1`, taskID, signal).
		Scan(&sigID, &payload)
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("look up signal %q of task %d: %w", signal, taskID, err)
	}
	_, err = t.Deliver(sigID, id, taskID, name, children, signal, payload)
	return err
}

// Deliver completes a waiting signal step with a signal and marks the
// signal taken. It reports false if the step no longer waits.
func (t *operatorTx) Deliver(sigID, stepID, taskID int64, stepName, children, signal, payload string) (bool, error) {
	result, err := signalResult(signal, payload)
	if err != nil {
		return false, fmt.Errorf("signal %q of task %d: %w", signal, taskID, err)
	}
	moved, err := t.MoveStep(stepID, taskID, stepName, state.StepWaiting, state.StepCompleted, 0, fmt.Sprintf("signal %q received", signal),
		`result = ?, run_at = NULL, finished_at = ?`, result, t.Now)
	if err != nil || !moved {
		return false, err
	}
	if _, err := t.Exec(`UPDATE signals SET step_id = ? WHERE id = ?`, stepID, sigID); err != nil {
		return false, fmt.Errorf("mark signal %q of task %d taken: %w", signal, taskID, err)
	}
	return true, t.StepEnded(taskID, stepName, children, state.StepCompleted, "")
}

// TimeOutWaits fails the signal waits whose deadline passed.
func (t *operatorTx) TimeOutWaits() (int, error) {
	rows, err := t.Query(`SELECT id, task_id, name, children, signal FROM steps
		WHERE state = 'waiting' AND signal != '' AND run_at IS NOT NULL AND run_at <= ?`, t.Now)
	if err != nil {
		return 0, fmt.Errorf("find timed-out signal waits: %w", err)
	}
	type wait struct {
		id, task               int64
		name, children, signal string
	}
	waits, err := sqldb.Collect(rows, func(r sqldb.Row) (wait, error) {
		var w wait
		err := r.Scan(&w.id, &w.task, &w.name, &w.children, &w.signal)
		return w, err
	})
	if err != nil {
		return 0, fmt.Errorf("find timed-out signal waits: %w", err)
	}
	n := 0
	for _, w := range waits {
		msg := fmt.Sprintf("timed out waiting for signal %q", w.signal)
		moved, err := t.MoveStep(w.id, w.task, w.name, state.StepWaiting, state.StepFailed, 0, msg,
			`error = ?, run_at = NULL, finished_at = ?`, msg, t.Now)
		if err != nil {
			return n, err
		}
		if moved {
			if err := t.StepEnded(w.task, w.name, w.children, state.StepFailed, msg); err != nil {
				return n, err
			}
			n++
		}
	}
	return n, nil
}
