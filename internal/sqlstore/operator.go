package sqlstore

import (
	"context"

	"github.com/weftrun/weft/internal/sqlstore/transition"
	"github.com/weftrun/weft/store"
)

// This file holds what operators do to tasks and steps, each in one write
// transaction: cancel and retry a task, retry or resolve a single step
// (transition/operator.go decides what each changes).

// CancelTask cancels a task and its open steps.
func (s *admin) CancelTask(ctx context.Context, id int64, engineID, reason string) ([]store.Fence, error) {
	if reason == "" {
		reason = "cancelled"
	}
	var running []store.Fence
	err := s.writeRetry(ctx, engineID, func(t *transition.Tx) (err error) {
		if err := t.LockTasks([]int64{id}); err != nil {
			return err
		}
		running, err = t.CancelTask(id, reason)
		return err
	})
	return running, err
}

// RetryTask moves a failed task back to running.
func (s *admin) RetryTask(ctx context.Context, id int64, engineID, reason string) error {
	taskReason, stepReason := "retried", "task retried"
	if reason != "" {
		taskReason, stepReason = reason, "task retried: "+reason
	}
	return s.writeRetry(ctx, engineID, func(t *transition.Tx) error {
		if err := t.LockTasks([]int64{id}); err != nil {
			return err
		}
		return t.RetryTask(id, taskReason, stepReason)
	})
}

// RetryStep makes a failed or expired step ready again.
func (s *admin) RetryStep(ctx context.Context, id int64, engineID, reason string) error {
	if reason == "" {
		reason = "step retried by an operator"
	}
	return s.write(ctx, engineID, func(t *transition.Tx) error { return t.RetryStep(id, reason) })
}

// ResolveStep ends a step by an operator's hand.
func (s *admin) ResolveStep(ctx context.Context, r store.StepResolution) error {
	if r.Reason == "" {
		r.Reason = "resolved by an operator"
	}
	return s.write(ctx, r.EngineID, func(t *transition.Tx) error { return t.ResolveStep(r.StepID, r.Result, r.Reason) })
}
