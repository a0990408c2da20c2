package weft

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/weftrun/weft/internal/admin"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/wire"
)

// BulkRequest is an action on the tasks a filter selects: its Filter (an
// empty one is refused unless All is set), DryRun (count only), Force (a
// delete cancels unfinished tasks first), the Actor and Reason recorded for
// every task, the BatchSize of each transaction (default 500), for a
// delete, an Archive that receives each batch before it is deleted, and
// when to stop early: Until (a time) or MaxBatches. Cursor continues an
// action that stopped early.
type BulkRequest = admin.BulkRequest

// BulkResult is what a bulk action did: the tasks Matched, Done and
// Skipped (changed meanwhile), or with DryRun the count alone; Complete,
// or else the tasks Remaining and the cursor (Next) to go on from.
type BulkResult = admin.BulkResult

// ArchivedTask is a deleted task as archived: the task with its steps, and
// its audit trail.
type ArchivedTask = store.ArchivedTask

// Retention is how long the finished tasks of a namespace in one state
// are kept.
type Retention = store.Retention

// OperatorEntry is one entry of the operator log: a deletion of a task or
// a change of retention, with who did it and why.
type OperatorEntry = store.OperatorEntry

// WorkerInfo is a live engine or remote worker: its handlers, how many
// steps it holds and its last heartbeat.
type WorkerInfo = store.EngineInfo

// CancelTasks cancels the pending and running tasks r.Filter selects, in
// batches of r.BatchSize tasks per transaction, each task with an audit
// entry naming r.Actor and r.Reason. An interrupted call is continued by
// calling it again: what it cancelled no longer matches.
func (e *Engine) CancelTasks(ctx context.Context, r BulkRequest) (BulkResult, error) {
	return e.core.Admin().CancelTasks(ctx, r)
}

// RetryTasks retries the failed tasks r.Filter selects, in batches, as
// Retry does each.
func (e *Engine) RetryTasks(ctx context.Context, r BulkRequest) (BulkResult, error) {
	return e.core.Admin().RetryTasks(ctx, r)
}

// DeleteTasks deletes the finished tasks r.Filter selects with their
// steps, audit trail, signals and tags, in batches, recording each
// deletion in the operator log. Unfinished tasks are refused (a filter on
// an unfinished state is ErrInvalid) unless r.Force cancels them first.
// With r.Archive set, each batch is archived before it is deleted.
func (e *Engine) DeleteTasks(ctx context.Context, r BulkRequest) (BulkResult, error) {
	return e.core.Admin().DeleteTasks(ctx, r)
}

// Prune deletes the tasks in a final state st that finished more than
// olderThan ago (see DeleteTasks; r.Filter may narrow them further).
func (e *Engine) Prune(ctx context.Context, st state.Task, olderThan time.Duration, r BulkRequest) (BulkResult, error) {
	if err := CheckPruneAge(st, olderThan); err != nil {
		return BulkResult{}, err
	}
	r.Filter.State, r.Filter.FinishedBefore = st, time.Now().Add(-olderThan)
	return e.core.Admin().DeleteTasks(ctx, r)
}

// CheckPruneAge refuses an age Prune would not take, saying why: a prune
// keeps the tasks that finished recently, so an age of 0 or less, which
// would keep none, is refused (DeleteTasks with a state filter deletes
// them all).
func CheckPruneAge(st state.Task, olderThan time.Duration) error {
	if olderThan > 0 {
		return nil
	}
	return store.Invalidf("older_than", "must be more than 0: a prune keeps the %s tasks that finished more recently, and an age of %s would keep none; to delete every %s task, delete by state instead",
		st, olderThan, st)
}

// ArchiveTo returns an archive for BulkRequest.Archive that appends each
// task to f as one JSON line ({"task": …, "audit": […]}) and syncs f
// before the delete goes on.
func ArchiveTo(f *os.File) func([]ArchivedTask) error {
	return func(tasks []ArchivedTask) error {
		w := bufio.NewWriter(f)
		enc := json.NewEncoder(w)
		for i := range tasks {
			if err := enc.Encode(wire.ArchivedTaskOf(tasks[i])); err != nil {
				return fmt.Errorf("archive task %d: %w", tasks[i].Task.ID, err)
			}
		}
		if err := w.Flush(); err != nil {
			return fmt.Errorf("archive to %s: %w", f.Name(), err)
		}
		if err := f.Sync(); err != nil {
			return fmt.Errorf("archive to %s: sync: %w", f.Name(), err)
		}
		return nil
	}
}

// SetRetention sets how long the finished tasks of a namespace in state st
// are kept (0 clears it); a workflow's own retention takes precedence for
// its tasks. The maintenance leader applies it every UpkeepInterval. The
// change is recorded in the operator log with op's actor.
func (e *Engine) SetRetention(ctx context.Context, namespace string, st state.Task, keep time.Duration, op Operator) error {
	return e.core.Admin().SetRetention(ctx, namespace, st, keep, op.Actor)
}

// Retentions lists the namespace retentions set.
func (e *Engine) Retentions(ctx context.Context) ([]Retention, error) {
	return e.core.Admin().Retentions(ctx)
}

// ApplyRetention deletes now the finished tasks past their retention (a
// bounded number of batches per rule; call again for more) and returns how
// many it deleted. The maintenance leader calls it every UpkeepInterval.
func (e *Engine) ApplyRetention(ctx context.Context) (int, error) {
	return e.core.Maintenance().ApplyRetention(ctx, time.Now())
}

// OperatorLog returns the newest entries of the operator log, newest first.
func (e *Engine) OperatorLog(ctx context.Context, limit int) ([]OperatorEntry, error) {
	return e.core.Admin().OperatorLog(ctx, limit)
}

// ListWorkers returns the live engines and remote workers with the
// handlers they serve, the steps they hold and their last heartbeat.
func (e *Engine) ListWorkers(ctx context.Context) ([]WorkerInfo, error) {
	return e.core.Admin().ListWorkers(ctx)
}

// StaleAfter is the engine's attention threshold (Config.StaleAfter).
func (e *Engine) StaleAfter() time.Duration { return e.core.Admin().StaleAfter() }
