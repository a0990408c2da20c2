package store

import (
	"encoding/json"
	"time"

	"github.com/weftrun/weft/state"
)

// TaskFilter selects tasks for ListTasks. Zero fields do not filter.
type TaskFilter struct {
	Namespace string
	// Namespaces, if not nil, selects the tasks in one of these namespaces
	// (none when empty): where a credential may look (beside Namespace,
	// which a caller chooses).
	Namespaces []string
	// IDs, if set, selects these tasks alone.
	IDs []int64
	// Workflow is "namespace/name", or a name (in Namespace, or in every
	// namespace): the engine reads it with workflow.ParseFilter, and the
	// store gets the bare name.
	Workflow string
	State    state.Task
	BeforeID int64 // cursor: only tasks with a smaller id
	Limit    int   // default 100
	// CreatedAfter and CreatedBefore bound the creation time (inclusive,
	// exclusive); zero does not bound.
	CreatedAfter  time.Time
	CreatedBefore time.Time
	// FinishedBefore selects tasks that finished before it; zero does not
	// bound.
	FinishedBefore time.Time
	// Tags selects tasks carrying every one of these tags (key and value).
	Tags map[string]string
	// Schedule selects the tasks a schedule of this name submitted (with
	// Namespace and Workflow to tell apart schedules of other workflows
	// with the same name).
	Schedule string
	// States selects tasks in any of these states (besides State, if set).
	States []state.Task
	// Attention selects the tasks that need a person: a step failed or
	// expired; a step ready for longer than StaleAfter (default
	// DefaultStaleAfter) while no live engine or remote worker serves its
	// handler; a step waiting for a signal past its deadline. ListTasks
	// then fills each task's Attention with the reasons.
	Attention  bool
	StaleAfter time.Duration
	// Active makes ListTasks fill each task's Active with its steps that
	// are ready, running or waiting: where an unfinished task stands. It
	// selects nothing.
	Active bool
	// Key, if set, selects the tasks with this idempotency key (in any
	// namespace unless Namespace is set).
	Key string
}

// Selects reports whether f selects some tasks rather than every one: a
// field that narrows the selection is set (the cursor, the page size and
// StaleAfter do not narrow it). Bulk actions on an empty filter need their
// caller to say that every task is meant.
func (f TaskFilter) Selects() bool {
	return f.Namespace != "" || f.Workflow != "" || f.State != "" || len(f.States) > 0 || !f.CreatedAfter.IsZero() ||
		!f.CreatedBefore.IsZero() || !f.FinishedBefore.IsZero() || len(f.Tags) > 0 || f.Schedule != "" || f.Attention || f.Key != ""
}

// DefaultStaleAfter is how long a ready step may wait for a handler nobody
// serves before its task needs attention.
const DefaultStaleAfter = 5 * time.Minute

// AuditEntry is one recorded transition of a task (Step == "") or a step.
type AuditEntry struct {
	// ID is unique and grows in the order the transitions were recorded
	// (within one transaction; across transactions the history orders
	// them by commit). A claim is recorded when its run ends or at its
	// engine's next heartbeat; until then a running step's claim shows in
	// its task's audit trail with ID 0.
	ID       int64
	TaskID   int64
	Step     string
	From     string
	To       string
	At       time.Time
	Attempt  int
	EngineID string
	Reason   string
}

// StepResolution is an operator's decision to end a step by hand.
type StepResolution struct {
	StepID int64
	// Result, if set, is the step's result as its dependents see it.
	Result   json.RawMessage
	EngineID string
	Reason   string
}

// QueueCount is how many unfinished steps of a namespace are in one state.
type QueueCount struct {
	Namespace string
	State     state.Step
	Count     int
}
