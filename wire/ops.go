package wire

import (
	"time"
)

// TaskFilter selects tasks for a bulk action (the body's "filter"). Empty
// fields do not filter.
type TaskFilter struct {
	Namespace string `json:"namespace,omitempty"`
	// Workflow is a workflow name (with Namespace) or namespace/name.
	Workflow string            `json:"workflow,omitempty"`
	State    string            `json:"state,omitempty"`
	Tags     map[string]string `json:"tags,omitempty"`
	// Schedule selects the tasks a schedule of this name submitted.
	Schedule       string     `json:"schedule,omitempty"`
	CreatedAfter   *time.Time `json:"created_after,omitempty"`
	CreatedBefore  *time.Time `json:"created_before,omitempty"`
	FinishedBefore *time.Time `json:"finished_before,omitempty"`
	// Attention selects the tasks that need a person.
	Attention bool `json:"attention,omitempty"`
}

// BulkRequest is the body of POST /v1/tasks/cancel, /v1/tasks/retry and
// /v1/tasks/delete: the tasks a filter selects, or the tasks IDs names
// (at most MaxBulkIDs, with an empty filter).
type BulkRequest struct {
	Filter TaskFilter `json:"filter"`
	IDs    []int64    `json:"ids,omitempty"`
	// All must be set to act on every task (an empty filter).
	All    bool   `json:"all,omitempty"`
	DryRun bool   `json:"dry_run,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Force, for a delete, cancels unfinished tasks first.
	Force bool `json:"force,omitempty"`
	// Cursor continues an action by filter that answered "complete":
	// false: the "next" of that answer.
	Cursor int64 `json:"cursor,omitempty"`
}

// MaxBulkIDs is the most task ids one bulk request names.
const MaxBulkIDs = 1000

// BulkResult answers a bulk action.
type BulkResult struct {
	Matched int  `json:"matched"`
	Done    int  `json:"done"`
	Skipped int  `json:"skipped"`
	DryRun  bool `json:"dry_run,omitempty"`
	// Complete is false when the request's time ran out before the end of
	// the selection: the counts are what was done (committed), Remaining
	// how many tasks are left. Send the request again with "cursor": Next
	// (by filter), or with the ids after the first Matched (by ids).
	Complete  bool  `json:"complete"`
	Remaining int   `json:"remaining"`
	Next      int64 `json:"next,omitempty"`
}

// PruneRequest is the body of POST /v1/tasks/prune: delete the tasks in a
// final State that finished more than OlderThan ago ("7d", "12h").
type PruneRequest struct {
	State     string `json:"state"`
	OlderThan string `json:"older_than"`
	Namespace string `json:"namespace,omitempty"`
	DryRun    bool   `json:"dry_run,omitempty"`
	// Cursor continues a prune that answered "complete": false.
	Cursor int64 `json:"cursor,omitempty"`
}

// Retention is the body of PUT /v1/retention/{namespace}: how long
// finished tasks of each final state are kept, as durations ("7d",
// "12h"); an empty string clears one.
type Retention struct {
	Keep map[string]string `json:"keep"`
}

// RetentionList is the body of GET /v1/retention.
type RetentionList struct {
	Retention []RetentionSetting `json:"retention"`
}

// Worker is a live engine or remote worker (GET /v1/workers).
type Worker struct {
	ID          string    `json:"id"`
	Kind        string    `json:"kind"` // "engine" or "remote"
	Host        string    `json:"host"`
	PID         int       `json:"pid,omitempty"`
	Leader      bool      `json:"leader,omitempty"`
	Handlers    []string  `json:"handlers"`
	Held        int       `json:"held"`
	StartedAt   time.Time `json:"started_at"`
	HeartbeatAt time.Time `json:"heartbeat_at"`
}

// WorkerList is the body of GET /v1/workers.
type WorkerList struct {
	Workers []Worker `json:"workers"`
}

// OperatorLog is the body of GET /v1/oplog: the newest entries first.
type OperatorLog struct {
	Entries []OperatorEntry `json:"entries"`
}
