package weft_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/weftrun/weft"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/workflow"
)

// flaky fails its first n attempts, then succeeds.
func flaky(n int) weft.Handler {
	return func(ctx context.Context, a *weft.Attempt) (any, error) {
		if a.Number <= n {
			return nil, fmt.Errorf("attempt %d fails", a.Number)
		}
		return map[string]int{"attempt": a.Number}, nil
	}
}

func TestRetryModes(t *testing.T) {
	t.Parallel()
	zero := 0.0
	tests := []struct {
		name      string
		policy    workflow.RetryPolicy
		failures  int
		wantState state.Task
		attempts  int
	}{
		{"exponential recovers", workflow.RetryPolicy{MaxAttempts: 3, Backoff: "exponential", Initial: workflow.Duration(5 * time.Millisecond), Max: workflow.Duration(20 * time.Millisecond)}, 2, state.TaskCompleted, 3},
		{"fixed recovers", workflow.RetryPolicy{MaxAttempts: 4, Backoff: "fixed", Initial: workflow.Duration(5 * time.Millisecond), Jitter: &zero}, 3, state.TaskCompleted, 4},
		{"linear recovers", workflow.RetryPolicy{MaxAttempts: 3, Backoff: "linear", Initial: workflow.Duration(5 * time.Millisecond)}, 1, state.TaskCompleted, 2},
		{"attempts exhausted", workflow.RetryPolicy{MaxAttempts: 2, Backoff: "fixed", Initial: workflow.Duration(5 * time.Millisecond)}, 5, state.TaskFailed, 2},
		{"no retry", workflow.RetryPolicy{MaxAttempts: 1}, 1, state.TaskFailed, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			eachBackend(t, func(t *testing.T, open storeFactory) {
				e := newEngine(t, open(t), weft.Config{})
				e.Handle("flaky", flaky(tt.failures))
				register(t, e, workflow.New("test", "retry", "1").Step("s", "flaky", workflow.WithRetry(tt.policy)))
				start(t, e)
				task := wait(t, e, submit(t, e, weft.Submission{Workflow: "test/retry"}).Task.ID)
				require.Equal(t, tt.wantState, task.State, task.Error)
				require.Equal(t, tt.attempts, task.Steps[0].Attempts)
				audit, err := e.Audit(context.Background(), task.ID)
				require.NoError(t, err)
				retries := 0
				for _, a := range audit {
					// A retry whose delay passed by the time it is written goes straight to ready.
					if a.Step != "" && a.From == "running" && (a.To == "waiting" || a.To == "ready") {
						retries++
						require.Contains(t, a.Reason, "fails")
					}
				}
				require.Equal(t, min(tt.failures, tt.attempts-1), retries)
			})
		})
	}
}

func TestRetryAfterDelay(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		e := newEngine(t, open(t), weft.Config{})
		e.Handle("h", func(ctx context.Context, a *weft.Attempt) (any, error) {
			if a.Number == 1 {
				return nil, weft.RetryAfter(30*time.Millisecond, errors.New("rate limited"))
			}
			return "ok", nil
		})
		// The policy's backoff would wait an hour: RetryAfter overrides it.
		register(t, e, workflow.New("test", "after", "1").Step("s", "h",
			workflow.WithRetry(workflow.RetryPolicy{MaxAttempts: 2, Backoff: "fixed", Initial: workflow.Duration(time.Hour)})))
		start(t, e)
		task := wait(t, e, submit(t, e, weft.Submission{Workflow: "test/after"}).Task.ID)
		require.Equal(t, state.TaskCompleted, task.State)
		require.Equal(t, 2, task.Steps[0].Attempts)
		require.GreaterOrEqual(t, task.Steps[0].StartedAt.Sub(*task.StartedAt), 30*time.Millisecond)
	})
}

func TestTimeoutCancelsHandler(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		e := newEngine(t, open(t), weft.Config{})
		sawCancel := make(chan error, 1)
		e.Handle("slow", func(ctx context.Context, a *weft.Attempt) (any, error) {
			<-ctx.Done()
			sawCancel <- ctx.Err()
			return nil, ctx.Err()
		})
		register(t, e, workflow.New("test", "timeout", "1").Step("s", "slow",
			workflow.WithTimeout(20*time.Millisecond), workflow.WithRetry(workflow.RetryPolicy{MaxAttempts: 1})))
		start(t, e)
		task := wait(t, e, submit(t, e, weft.Submission{Workflow: "test/timeout"}).Task.ID)
		require.ErrorIs(t, <-sawCancel, context.DeadlineExceeded)
		require.Equal(t, state.TaskFailed, task.State)
		require.Contains(t, task.Steps[0].Error, "timed out after 20ms")
	})
}

func TestPanicIsFailure(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		e := newEngine(t, open(t), weft.Config{})
		e.Handle("boom", func(ctx context.Context, a *weft.Attempt) (any, error) {
			if a.Number == 1 {
				panic("kaboom")
			}
			return "recovered", nil
		})
		register(t, e, workflow.New("test", "panic", "1").Step("s", "boom",
			workflow.WithRetry(workflow.RetryPolicy{MaxAttempts: 2, Backoff: "fixed", Initial: workflow.Duration(time.Millisecond)})))
		start(t, e)
		task := wait(t, e, submit(t, e, weft.Submission{Workflow: "test/panic"}).Task.ID)
		require.Equal(t, state.TaskCompleted, task.State)
		require.Equal(t, 2, task.Steps[0].Attempts)
		audit, err := e.Audit(context.Background(), task.ID)
		require.NoError(t, err)
		require.True(t, slices.ContainsFunc(audit, func(a weft.AuditEntry) bool { return strings.Contains(a.Reason, "panicked: kaboom") }))
	})
}

func TestPermanentErrorSkipsDescendants(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		e := newEngine(t, open(t), weft.Config{})
		e.Handle("ok", func(ctx context.Context, a *weft.Attempt) (any, error) { return "ok", nil })
		e.Handle("bad", func(ctx context.Context, a *weft.Attempt) (any, error) {
			return nil, weft.Permanent(errors.New("card declined"))
		})
		register(t, e, workflow.New("test", "perm", "1").
			Step("validate", "ok").
			Step("charge", "bad", workflow.DependsOn("validate"), workflow.WithRetry(workflow.RetryPolicy{MaxAttempts: 5})).
			Step("ship", "ok", workflow.DependsOn("charge")).
			Step("notify", "ok", workflow.DependsOn("ship")).
			Step("audit", "ok", workflow.DependsOn("validate")))
		start(t, e)
		task := wait(t, e, submit(t, e, weft.Submission{Workflow: "test/perm"}).Task.ID)
		require.Equal(t, state.TaskFailed, task.State)
		require.Contains(t, task.Error, "card declined")
		charge := stepByName(t, task, "charge")
		require.Equal(t, state.StepFailed, charge.State)
		require.Equal(t, 1, charge.Attempts, "a permanent error is not retried")
		require.Equal(t, state.StepSkipped, stepByName(t, task, "ship").State)
		require.Equal(t, state.StepSkipped, stepByName(t, task, "notify").State)
		require.Equal(t, state.StepCompleted, stepByName(t, task, "audit").State, "independent branches still run")
	})
}
