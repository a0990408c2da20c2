package store

import (
	"encoding/json"
	"time"

	"github.com/weftrun/weft/state"
)

// TaskFilter selects tasks for ListTasks. Zero fields do not filter.
type TaskFilter struct {
	Namespace string
	Workflow  string
	State     state.Task
	BeforeID  int64 // cursor: only tasks with a smaller id
	Limit     int   // default 100
	// CreatedAfter and CreatedBefore bound the creation time (inclusive,
	// exclusive); zero does not bound.
	CreatedAfter  time.Time
	CreatedBefore time.Time
	// Key, if set, selects the tasks with this idempotency key (in any
	// namespace unless Namespace is set).
	Key string
}

// AuditEntry is one recorded transition of a task (Step == "") or a step.
type AuditEntry struct {
	ID       int64     `json:"id"`
	TaskID   int64     `json:"task_id"`
	Step     string    `json:"step,omitempty"`
	From     string    `json:"from"`
	To       string    `json:"to"`
	At       time.Time `json:"at"`
	Attempt  int       `json:"attempt,omitempty"`
	EngineID string    `json:"engine_id,omitempty"`
	Reason   string    `json:"reason,omitempty"`
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
	Namespace string     `json:"namespace"`
	State     state.Step `json:"state"`
	Count     int        `json:"count"`
}
