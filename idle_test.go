package weft_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/workflow"
)

// TestIdleEngineWakes: an idle engine that would poll only once an hour
// still starts at once what is submitted to it, and at its time what waits:
// a task submitted to start later and a step retried after a backoff. Its
// claims are woken by the store, its timers by the submission and the
// outcome that made a step wait, not by polling.
func TestIdleEngineWakes(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		ctx := context.Background()
		// Every period long: no poll, heartbeat or reap finds the work.
		e := newEngine(t, open(t), weft.Config{PollInterval: time.Hour, HeartbeatInterval: 30 * time.Minute, LeaseTTL: time.Hour})
		var calls atomic.Int64
		e.Handle("flaky", func(context.Context, *weft.Attempt) (any, error) {
			if calls.Add(1) == 1 {
				return nil, errors.New("first attempt fails")
			}
			return "ok", nil
		})
		e.Handle("ok", func(context.Context, *weft.Attempt) (any, error) { return "ok", nil })
		retry := workflow.RetryPolicy{MaxAttempts: 2, Backoff: "fixed", Initial: workflow.Duration(20 * time.Millisecond)}
		require.NoError(t, e.Register(ctx, workflow.New("idle", "now", "1").Step("s", "ok")))
		require.NoError(t, e.Register(ctx, workflow.New("idle", "retry", "1").Step("s", "flaky", workflow.WithRetry(retry))))
		start(t, e)

		// Submitted to an engine that has nothing to do.
		task := wait(t, e, submit(t, e, weft.Submission{Workflow: "idle/now"}).Task.ID)
		require.Equal(t, state.TaskCompleted, task.State)

		// Submitted to start later: the maintenance loop, asleep for
		// nothing due, is nudged to read the new due time.
		runAt := time.Now().Add(50 * time.Millisecond)
		task = wait(t, e, submit(t, e, weft.Submission{Workflow: "idle/now", RunAt: runAt}).Task.ID)
		require.Equal(t, state.TaskCompleted, task.State)

		// A step retried after a backoff waits, then runs again.
		task = wait(t, e, submit(t, e, weft.Submission{Workflow: "idle/retry"}).Task.ID)
		require.Equal(t, state.TaskCompleted, task.State)
		require.Equal(t, 2, stepByName(t, task, "s").Attempts)
	})
}
