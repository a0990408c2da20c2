package store

import (
	"context"
	"encoding/json"
)

// KindWorkflow: the step runs no handler of its own; it starts a child task
// of another workflow (Outcome.Child) and waits, holding no slot, until the
// child ends. A completed child completes the step with the child's result
// (TaskResult); a child that failed, expired or was cancelled makes the
// step ready again with Step.ChildError set, for the engine to fail the
// attempt under the step's retry policy (a retry starts a new child).
const KindWorkflow = "workflow"

// ChildStart is a child task to start from a running step of a parent.
type ChildStart struct {
	// Task is the child; the store links it to the parent task and step
	// and sets its depth. Its IdempotencyKey makes the start crash-safe:
	// a start with a key that exists returns the existing child.
	Task TaskInsert
	// MaxDepth bounds the depth of tasks below a root task (whose depth is
	// 0), MaxChildren the children of one task; a start past either fails
	// the starting step for good. 0 means no bound.
	MaxDepth, MaxChildren int
}

// Children starts child tasks from running steps.
type Children interface {
	// StartChild starts a child task from the step running under f, in
	// one transaction with the check of f (ErrStaleLease when the step is
	// no longer held). A child whose idempotency key exists is returned
	// with Duplicate set. A start past the limits is ErrConflict.
	StartChild(ctx context.Context, f Fence, c ChildStart) (InsertResult, error)
	// TaskResult returns what a completed task hands to the step that
	// started it: the results of its final steps (those no other step
	// depends on, batch items aside) that completed or were resolved, as
	// a JSON object by step name.
	TaskResult(ctx context.Context, id int64) (json.RawMessage, error)
}
