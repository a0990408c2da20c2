package admin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/workflow"
)

// This file holds the actions on many tasks at once: cancel, retry and
// delete by filter, one batch (one transaction) at a time, so that no lock
// is held for long and an interrupted action is continued by running it
// again (what it did no longer matches its filter). An action told when to
// stop (BulkRequest.Until, MaxBatches) answers with what its committed
// batches did and what remains, and is continued from its cursor.

// DefaultBatchSize is how many tasks one transaction of a bulk action
// takes.
const DefaultBatchSize = 500

// BulkRequest is an action on the tasks a filter selects.
type BulkRequest struct {
	// Filter selects the tasks; Limit and BeforeID are ignored. An empty
	// filter is refused unless All is set.
	Filter store.TaskFilter
	All    bool
	// IDs, if set, are the tasks to act on instead of a filter's; the
	// filter's Namespaces, if set, still bound them (a task outside is not
	// found).
	IDs []int64
	// DryRun counts the tasks the action would apply to and changes
	// nothing.
	DryRun bool
	// Force, for a delete, cancels unfinished tasks first instead of
	// leaving them.
	Force bool
	// Actor (who acts; "" means this engine) and Reason are recorded for
	// every task: in its audit trail, or in the operator log for a delete.
	Actor, Reason string
	// BatchSize is how many tasks each transaction takes; 0 means
	// DefaultBatchSize.
	BatchSize int
	// Archive, for a delete, receives each batch before it is deleted,
	// inside its transaction (see store.DeleteParams.Archive).
	Archive func([]store.ArchivedTask) error
	// Cursor continues an action by filter that answered Complete false:
	// the Next of its result. The walk goes on below that task id.
	Cursor int64
	// Until, if set, is when the action stops starting batches: it
	// answers with what its committed batches did, Complete false and
	// what remains (a REST request sets it before its deadline).
	// MaxBatches, if positive, stops it after that many batches the same
	// way.
	Until      time.Time
	MaxBatches int
}

// BulkResult is what a bulk action did.
type BulkResult struct {
	// Matched counts the tasks selected (with DryRun, those the action
	// would apply to).
	Matched int
	// Done counts the tasks acted on; Skipped those that changed
	// meanwhile so that the action no longer applied.
	Done    int
	Skipped int
	DryRun  bool
	// Complete is false when the action stopped before the end of its
	// selection (BulkRequest.Until or MaxBatches): what it counts was
	// done, committed batch by batch, and Remaining tasks are left.
	// Continue by filter with BulkRequest.Cursor set to Next; by ids,
	// with the ids after the first Matched.
	Complete  bool
	Remaining int
	Next      int64
}

var (
	cancellable = []state.Task{state.TaskPending, state.TaskRunning}
	retryable   = []state.Task{state.TaskFailed}
	finished    = []state.Task{state.TaskCompleted, state.TaskFailed, state.TaskCancelled, state.TaskExpired}
)

// scope narrows r's filter to the states the action applies to, refusing a
// filter on a state it cannot apply to and an empty filter without All.
func scope(action string, r *BulkRequest, states []state.Task) error {
	if !r.Filter.Selects() && !r.All && len(r.IDs) == 0 {
		return fmt.Errorf("%s: %w", action, store.Invalidf("all", "the filter is empty, which selects every task: give a filter, ids, or all to act on every task"))
	}
	if err := store.ValidateTags(r.Filter.Tags); err != nil {
		return inFilter(action, err)
	}
	f := &r.Filter
	f.Limit, f.BeforeID = 0, 0
	var err error
	if f.Namespace, f.Workflow, err = workflow.ParseFilter(f.Namespace, f.Workflow); err != nil {
		return inFilter(action, err)
	}
	if f.State != "" && !f.State.Valid() {
		return inFilter(action, store.Invalidf("state", "%q is not a task state", f.State))
	}
	if f.State != "" && !slices.Contains(states, f.State) {
		return inFilter(action, store.Invalidf("state", "tasks that are %s cannot be %s (only %s)", f.State, past(action), joinStates(states)))
	}
	if f.State == "" && len(f.States) == 0 {
		f.States = states
	}
	if r.BatchSize <= 0 {
		r.BatchSize = DefaultBatchSize
	}
	return nil
}

// inFilter names a field of the request's filter as the API does
// ("filter.state").
func inFilter(action string, err error) error {
	if fe, ok := errors.AsType[*store.FieldError](err); ok {
		err = store.Invalidf("filter."+fe.Field, "%s", fe.Problem)
	}
	return fmt.Errorf("%s: %w", action, err)
}

func past(action string) string {
	switch action {
	case "cancel":
		return "cancelled"
	case "retry":
		return "retried"
	}
	return "deleted"
}

func joinStates(states []state.Task) string {
	s := ""
	for i, st := range states {
		if i > 0 {
			s += ", "
		}
		s += string(st)
	}
	return s
}

// CancelTasks cancels the pending and running tasks r.Filter selects.
func (a *Admin) CancelTasks(ctx context.Context, r BulkRequest) (BulkResult, error) {
	if err := scope("cancel", &r, cancellable); err != nil {
		return BulkResult{}, err
	}
	if r.Reason == "" {
		r.Reason = "cancelled by user"
	}
	return a.bulk(ctx, r, func(ids []int64) (store.BatchResult, error) {
		res, err := a.store.CancelTasks(ctx, ids, r.Actor, r.Reason)
		if err == nil {
			a.cancelRunning(res.Running)
		}
		return res, err
	})
}

// RetryTasks retries the failed tasks r.Filter selects.
func (a *Admin) RetryTasks(ctx context.Context, r BulkRequest) (BulkResult, error) {
	if err := scope("retry", &r, retryable); err != nil {
		return BulkResult{}, err
	}
	return a.bulk(ctx, r, func(ids []int64) (store.BatchResult, error) {
		return a.store.RetryTasks(ctx, ids, r.Actor, r.Reason)
	})
}

// DeleteTasks deletes the finished tasks r.Filter selects, with everything
// recorded about them; with r.Force it cancels the unfinished ones first.
func (a *Admin) DeleteTasks(ctx context.Context, r BulkRequest) (BulkResult, error) {
	states := finished
	if r.Force {
		states = state.Tasks
	}
	if err := scope("delete", &r, states); err != nil {
		return BulkResult{}, err
	}
	if r.Reason == "" {
		r.Reason = "deleted by user"
	}
	return a.bulk(ctx, r, func(ids []int64) (store.BatchResult, error) {
		if r.Force {
			res, err := a.store.CancelTasks(ctx, ids, r.Actor, "cancelled to delete: "+r.Reason)
			if err != nil {
				return store.BatchResult{}, err
			}
			a.cancelRunning(res.Running)
		}
		return a.store.DeleteTasks(ctx, store.DeleteParams{IDs: ids, Actor: r.Actor, Reason: r.Reason, Log: true, Archive: r.Archive})
	})
}

// bulk counts (DryRun) or walks the selection in batches, newest first,
// applying do to each, until the selection ends or r says to stop
// (stopping).
func (a *Admin) bulk(ctx context.Context, r BulkRequest, do func(ids []int64) (store.BatchResult, error)) (BulkResult, error) {
	if err := store.CheckReason(r.Reason); err != nil {
		return BulkResult{}, err
	}
	if r.Actor == "" {
		r.Actor = a.id()
	}
	if len(r.IDs) > 0 {
		// A task listed twice is one task: counted and acted on once.
		seen := make(map[int64]bool, len(r.IDs))
		r.IDs = slices.DeleteFunc(slices.Clone(r.IDs), func(id int64) bool {
			dup := seen[id]
			seen[id] = true
			return dup
		})
		if err := a.requireTasks(ctx, r.IDs, r.Filter.Namespaces); err != nil {
			return BulkResult{}, err
		}
		return a.bulkIDs(ctx, r, do)
	}
	if err := a.RequireFilter(ctx, r.Filter); err != nil {
		return BulkResult{}, err
	}
	f := r.Filter
	f.BeforeID = r.Cursor
	if r.DryRun {
		n, err := a.store.CountTasks(ctx, f)
		if err != nil {
			return BulkResult{}, fmt.Errorf("count tasks: %w", err)
		}
		return BulkResult{Matched: n, DryRun: true, Complete: true}, nil
	}
	var out BulkResult
	for batches := 0; ; batches++ {
		if err := ctx.Err(); err != nil {
			return out, fmt.Errorf("stopped after %d tasks: %w", out.Done, err)
		}
		if batches > 0 && stopping(r, batches) {
			// What is done is committed: say so, and what is left.
			out.Next = f.BeforeID
			n, err := a.store.CountTasks(context.WithoutCancel(ctx), f)
			if err != nil {
				return out, fmt.Errorf("after %d tasks, count what remains: %w", out.Done, err)
			}
			out.Remaining = n
			if n == 0 {
				out.Complete, out.Next = true, 0
			}
			return out, nil
		}
		ids, err := a.store.MatchTasks(ctx, f, r.BatchSize)
		if err != nil {
			return out, fmt.Errorf("select tasks: %w", err)
		}
		if len(ids) == 0 {
			out.Complete = true
			return out, nil
		}
		res, err := do(ids)
		if err != nil {
			return out, fmt.Errorf("after %d tasks: %w", out.Done, err)
		}
		out.add(len(ids), res)
		a.log.Info("bulk batch", "done", len(res.Done), "skipped", res.Skipped, "actor", r.Actor)
		f.BeforeID = ids[len(ids)-1]
	}
}

// add counts a batch of matched tasks and what the action did to them.
func (r *BulkResult) add(matched int, res store.BatchResult) {
	r.Matched += matched
	r.Done += len(res.Done)
	r.Skipped += res.Skipped
}

// stopping reports whether an action that did batches must stop before
// its next one: its Until passed or it did MaxBatches.
func stopping(r BulkRequest, batches int) bool {
	return (!r.Until.IsZero() && !time.Now().Before(r.Until)) || (r.MaxBatches > 0 && batches >= r.MaxBatches)
}

// bulkIDs applies do to r.IDs in batches, in their order.
func (a *Admin) bulkIDs(ctx context.Context, r BulkRequest, do func(ids []int64) (store.BatchResult, error)) (BulkResult, error) {
	if r.DryRun {
		return BulkResult{Matched: len(r.IDs), DryRun: true, Complete: true}, nil
	}
	var out BulkResult
	batches := 0
	for ids := range slices.Chunk(r.IDs, r.BatchSize) {
		if err := ctx.Err(); err != nil {
			return out, fmt.Errorf("stopped after %d tasks: %w", out.Done, err)
		}
		if batches > 0 && stopping(r, batches) {
			out.Remaining = len(r.IDs) - out.Matched
			return out, nil
		}
		res, err := do(ids)
		if err != nil {
			return out, fmt.Errorf("after %d tasks: %w", out.Done, err)
		}
		out.add(len(ids), res)
		batches++
	}
	out.Complete = true
	return out, nil
}
