package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/workflow"
)

// Get returns a task with its steps.
func (e *Engine) Get(ctx context.Context, id int64) (*store.Task, error) {
	return e.store.GetTask(ctx, id)
}

// Step returns one step of a task.
func (e *Engine) Step(ctx context.Context, id int64) (*store.Step, error) {
	return e.store.GetStep(ctx, id)
}

// RetryStep makes a failed or expired step ready again (see
// store.Admin.RetryStep), recorded as actor's action.
func (e *Engine) RetryStep(ctx context.Context, id int64, actor, reason string) error {
	if actor == "" {
		actor = e.ID()
	}
	if err := e.store.RetryStep(ctx, id, actor, reason); err != nil {
		return fmt.Errorf("weft: retry step %d: %w", id, err)
	}
	return nil
}

// ResolveStep ends a step by an operator's hand (see
// store.Admin.ResolveStep).
func (e *Engine) ResolveStep(ctx context.Context, r store.StepResolution) error {
	if r.EngineID == "" {
		r.EngineID = e.ID()
	}
	if err := e.store.ResolveStep(ctx, r); err != nil {
		return fmt.Errorf("weft: resolve step %d: %w", r.StepID, err)
	}
	return nil
}

// Backlog counts pending and running tasks, stopping at limit so that the
// cost stays bounded however large the backlog. It is also the cheapest
// read that tells whether the database answers.
func (e *Engine) Backlog(ctx context.Context, limit int) (int, error) {
	return e.store.CountUnfinishedTasks(ctx, limit)
}

// QueueDepth counts the unfinished steps by namespace and state.
func (e *Engine) QueueDepth(ctx context.Context) ([]store.QueueCount, error) {
	return e.store.QueueDepth(ctx)
}

// List returns tasks, newest first. f.Workflow is "namespace/name" or a
// name (see workflow.ParseFilter).
func (e *Engine) List(ctx context.Context, f store.TaskFilter) ([]store.Task, error) {
	var err error
	if f.Namespace, f.Workflow, err = workflow.ParseFilter(f.Namespace, f.Workflow); err != nil {
		return nil, fmt.Errorf("list tasks: %w", err)
	}
	return e.store.ListTasks(ctx, f)
}

// Audit returns a task's recorded transitions, oldest first.
func (e *Engine) Audit(ctx context.Context, taskID int64) ([]store.AuditEntry, error) {
	return e.store.Audit(ctx, taskID)
}

// Cancel cancels a task: every step not yet finished becomes cancelled and
// the contexts of its running handlers on this engine are cancelled at once
// (engines elsewhere notice at their next heartbeat). actor (who acted; ""
// means this engine) and reason ("" means "cancelled by user") are
// recorded in the audit trail.
func (e *Engine) Cancel(ctx context.Context, id int64, actor, reason string) error {
	if actor == "" {
		actor = e.ID()
	}
	if reason == "" {
		reason = "cancelled by user"
	}
	running, err := e.store.CancelTask(ctx, id, actor, reason)
	if err != nil {
		return fmt.Errorf("weft: cancel task %d: %w", id, err)
	}
	e.exec.cancelFences(running, errTaskCancelled)
	return nil
}

// Retry runs a failed task again from its failed steps, recording actor
// ("" means this engine) and reason in the audit trail.
func (e *Engine) Retry(ctx context.Context, id int64, actor, reason string) error {
	if actor == "" {
		actor = e.ID()
	}
	if err := e.store.RetryTask(ctx, id, actor, reason); err != nil {
		return fmt.Errorf("weft: retry task %d: %w", id, err)
	}
	return nil
}

// Wait blocks until the task ends or ctx is done, and returns the task.
// However many wait, the engine reads the states of all the tasks waited
// for in one statement (waits), when its store ended a task (or, on a
// store that does not tell, after each batch of outcomes it records) and
// every WaitPoll, for tasks that end on engines elsewhere.
func (e *Engine) Wait(ctx context.Context, id int64) (*store.Task, error) {
	done := e.waits.add(e, id)
	defer e.waits.remove(id, done)
	select {
	case err := <-done:
		if err != nil {
			return nil, err
		}
		return e.store.GetTask(ctx, id)
	case <-ctx.Done():
		task, err := e.store.GetTask(context.WithoutCancel(ctx), id)
		if err != nil {
			return nil, errors.Join(ctx.Err(), err)
		}
		return task, ctx.Err()
	}
}

// Signal sends a named signal with a payload (encoded as JSON; nil means
// null) to a task. The task's first step waiting for that name completes
// with {"signal": name, "payload": payload} as its result; if none waits
// yet, the signal is kept for the next step that begins to. It reports
// whether a waiting step took it at once. A task that has ended is
// ErrConflict.
func (e *Engine) Signal(ctx context.Context, taskID int64, name string, payload any, actor string) (bool, error) {
	if actor == "" {
		actor = e.ID()
	}
	if !workflow.ValidName(name) {
		return false, fmt.Errorf("%w signal name %q: use letters, digits, '_', '.' and '-'", store.ErrInvalid, name)
	}
	var raw json.RawMessage
	if payload == nil {
		raw = json.RawMessage("null")
	} else {
		var err error
		if raw, err = encodeInput(payload); err != nil {
			return false, fmt.Errorf("%w signal payload: %w", store.ErrInvalid, err)
		}
	}
	delivered, err := e.store.Signal(ctx, taskID, name, raw, actor)
	if err != nil {
		return false, fmt.Errorf("weft: signal %q to task %d: %w", name, taskID, err)
	}
	return delivered, nil
}
