package admin

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/weftrun/weft/internal/textsafe"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/workflow"
)

// Get returns a task with its steps.
func (a *Admin) Get(ctx context.Context, id int64) (*store.Task, error) {
	return a.store.GetTask(ctx, id)
}

// Step returns one step of a task.
func (a *Admin) Step(ctx context.Context, id int64) (*store.Step, error) {
	return a.store.GetStep(ctx, id)
}

// RetryStep makes a failed or expired step ready again (see
// store.Admin.RetryStep), recorded as actor's action.
func (a *Admin) RetryStep(ctx context.Context, id int64, actor, reason string) error {
	if err := store.CheckReason(reason); err != nil {
		return err
	}
	if actor == "" {
		actor = a.id()
	}
	if err := a.store.RetryStep(ctx, id, actor, reason); err != nil {
		return fmt.Errorf("retry step %d: %w", id, err)
	}
	return nil
}

// ResolveStep ends a step by an operator's hand (see
// store.Admin.ResolveStep).
func (a *Admin) ResolveStep(ctx context.Context, r store.StepResolution) error {
	if err := store.CheckReason(r.Reason); err != nil {
		return err
	}
	if len(r.Result) > 0 {
		// What no store keeps is refused, as over the API.
		if !json.Valid(r.Result) {
			return store.Invalidf("result", "must be JSON")
		}
		if path, err := textsafe.Find(r.Result); err != nil {
			return store.Invalidf(textsafe.Join("result", path), "%v", err)
		}
	}
	if r.EngineID == "" {
		r.EngineID = a.id()
	}
	if err := a.store.ResolveStep(ctx, r); err != nil {
		return fmt.Errorf("resolve step %d: %w", r.StepID, err)
	}
	return nil
}

// Backlog counts pending and running tasks, stopping at limit so that the
// cost stays bounded however large the backlog. It is also the cheapest
// read that tells whether the database answers.
func (a *Admin) Backlog(ctx context.Context, limit int) (int, error) {
	return a.store.CountUnfinishedTasks(ctx, limit)
}

// QueueDepth counts the unfinished steps by namespace and state.
func (a *Admin) QueueDepth(ctx context.Context) ([]store.QueueCount, error) {
	return a.store.QueueDepth(ctx)
}

// List returns tasks, newest first. f.Workflow is "namespace/name" or a
// name (see workflow.ParseFilter).
func (a *Admin) List(ctx context.Context, f store.TaskFilter) ([]store.Task, error) {
	var err error
	if f.Namespace, f.Workflow, err = workflow.ParseFilter(f.Namespace, f.Workflow); err != nil {
		return nil, fmt.Errorf("list tasks: %w", err)
	}
	return a.store.ListTasks(ctx, f)
}

// Audit returns a task's recorded transitions, oldest first.
func (a *Admin) Audit(ctx context.Context, taskID int64) ([]store.AuditEntry, error) {
	return a.store.Audit(ctx, taskID)
}

// Cancel cancels a task: every step not yet finished becomes cancelled and
// the contexts of its running handlers on this engine are cancelled at once
// (engines elsewhere notice at their next heartbeat). actor (who acted; ""
// means this engine) and reason ("" means "cancelled by user") are
// recorded in the audit trail.
func (a *Admin) Cancel(ctx context.Context, id int64, actor, reason string) error {
	if err := store.CheckReason(reason); err != nil {
		return err
	}
	if actor == "" {
		actor = a.id()
	}
	if reason == "" {
		reason = "cancelled by user"
	}
	running, err := a.store.CancelTask(ctx, id, actor, reason)
	if err != nil {
		return fmt.Errorf("cancel task %d: %w", id, err)
	}
	a.cancelRunning(running)
	return nil
}

// Retry runs a failed task again from its failed steps, recording actor
// ("" means this engine) and reason in the audit trail.
func (a *Admin) Retry(ctx context.Context, id int64, actor, reason string) error {
	if err := store.CheckReason(reason); err != nil {
		return err
	}
	if actor == "" {
		actor = a.id()
	}
	if err := a.store.RetryTask(ctx, id, actor, reason); err != nil {
		return fmt.Errorf("retry task %d: %w", id, err)
	}
	return nil
}
