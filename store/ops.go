package store

import (
	"context"
	"time"

	"github.com/weftrun/weft/state"
)

// Operations are the operator's actions on many tasks at once and the
// upkeep of the database: counting and selecting tasks by filter, acting on
// them in batches, deleting finished tasks (by hand or by retention), the
// operator log, and the engines and remote workers with the handlers they
// serve.
type Operations interface {
	// CountTasks counts the tasks f selects (f.Limit and f.BeforeID
	// included: BeforeID bounds, Limit is ignored).
	CountTasks(ctx context.Context, f TaskFilter) (int, error)
	// MatchTasks returns the ids of up to limit tasks f selects, newest
	// first; f.BeforeID continues after the last id of the previous batch.
	MatchTasks(ctx context.Context, f TaskFilter, limit int) ([]int64, error)
	// CancelTasks cancels the tasks among ids that can be cancelled, in
	// one transaction, each with its audit entry (engineID as actor, and
	// reason). Tasks that ended or vanished meanwhile are counted in
	// Skipped.
	CancelTasks(ctx context.Context, ids []int64, engineID, reason string) (BatchResult, error)
	// RetryTasks retries the failed tasks among ids, in one transaction,
	// as RetryTask does each; others are counted in Skipped.
	RetryTasks(ctx context.Context, ids []int64, engineID, reason string) (BatchResult, error)
	// DeleteTasks deletes the finished tasks among ids with their steps,
	// audit, signals and tags, in one transaction; unfinished ones are
	// left and counted in Skipped. See DeleteParams.
	DeleteTasks(ctx context.Context, p DeleteParams) (BatchResult, error)
	// FinishedTasks returns the ids of up to q.Limit tasks in q.State
	// that finished before q.FinishedBefore, oldest finished first.
	FinishedTasks(ctx context.Context, q FinishedQuery) ([]int64, error)

	// SetRetention sets (Keep > 0) or clears (Keep == 0) how long the
	// finished tasks of a namespace in one state are kept, and records the
	// change in the operator log.
	SetRetention(ctx context.Context, r Retention) error
	// Retentions lists the namespace retentions set.
	Retentions(ctx context.Context) ([]Retention, error)
	// OperatorLog returns the newest entries of the operator log, newest
	// first: deletions of tasks and changes of retention.
	OperatorLog(ctx context.Context, limit int) ([]OperatorEntry, error)

	// SetHandlers records the handlers an engine or remote worker serves
	// ("*": any), replacing those recorded before.
	SetHandlers(ctx context.Context, engineID string, handlers []string) error
	// ListWorkers returns the live engines and remote workers with the
	// handlers they serve and how many steps each holds.
	ListWorkers(ctx context.Context) ([]EngineInfo, error)
}

// BatchResult is what one batch of a bulk action did.
type BatchResult struct {
	// Done are the ids of the tasks acted on.
	Done []int64
	// Skipped counts the tasks left as they were: they no longer fit the
	// action (finished, retried or deleted meanwhile).
	Skipped int
	// Running are the fences of the steps that were running in the
	// cancelled tasks: their handlers must stop.
	Running []Fence
}

// DeleteParams says which tasks DeleteTasks deletes and what it records.
type DeleteParams struct {
	IDs []int64
	// Actor and Reason, with Log, record one operator-log entry per task
	// deleted. Retention deletes without (its counts are its record).
	Actor, Reason string
	Log           bool
	// Retention marks retention's deletes. On a store that keeps the audit
	// trail in time partitions (HistoryRoller), the tasks' rows there are
	// left to go with their partition; other deletes remove every row.
	Retention bool
	// Archive, if set, receives every task to delete, with its steps and
	// audit trail, before the delete, inside its transaction: an error
	// from it rolls the delete back. It must make the archive durable
	// (write and sync) before it returns.
	Archive func([]ArchivedTask) error
}

// ArchivedTask is a deleted task as archived: the task with its steps, and
// its audit trail.
type ArchivedTask struct {
	Task  Task
	Audit []AuditEntry
}

// FinishedQuery selects finished tasks for deletion by age.
type FinishedQuery struct {
	State          state.Task
	FinishedBefore time.Time
	// Namespace and Workflow, if set, narrow the selection.
	Namespace, Workflow string
	// ExceptWorkflows leaves out the tasks of these workflows of
	// Namespace (those with a retention of their own).
	ExceptWorkflows []string
	Limit           int
}

// Retention is how long the finished tasks of a namespace in one state are
// kept.
type Retention struct {
	Namespace string
	State     state.Task
	Keep      time.Duration
	UpdatedAt time.Time
	UpdatedBy string
}

// OperatorEntry is one entry of the operator log.
type OperatorEntry struct {
	ID      int64
	At      time.Time
	Actor   string
	Action  string // "delete", "retention"
	Subject string // "task 42", "namespace shop"
	Reason  string
}
