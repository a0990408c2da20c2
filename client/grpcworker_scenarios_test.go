package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/client"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/wire"
)

// startWorker runs a worker of g with handlers until the test ends.
func startWorker(t *testing.T, g *grpcServer, slots int, handlers map[string]client.StepHandler) {
	t.Helper()
	w, err := client.NewGRPCWorker(client.WorkerConfig{URL: g.hs.URL, Token: g.admin, Slots: slots, MinBackoff: 10 * time.Millisecond,
		MaxBackoff: 100 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	for name, h := range handlers {
		w.Handle(name, h)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
}

// TestGRPCWorkerCheckpointAndProgress: a handler reports its progress and
// saves a checkpoint; the attempt after its failure starts from that
// checkpoint. Outside a handler, or with a fraction out of range, both
// refuse at once.
func TestGRPCWorkerCheckpointAndProgress(t *testing.T) {
	t.Parallel()
	g := startGRPCServer(t)
	reported := make(chan int64, 1) // the step, once its progress is saved
	proceed := make(chan struct{})
	errs := make(chan error, 4)
	startWorker(t, g, 1, map[string]client.StepHandler{"remote.resume": func(ctx context.Context, step wire.ClaimedStep) (json.RawMessage, error) {
		if len(step.Checkpoint) > 0 && string(step.Checkpoint) != "null" {
			return json.RawMessage(`{"resumed":` + string(step.Checkpoint) + `}`), nil
		}
		errs <- client.Progress(ctx, 1.5, "too far")
		errs <- client.Progress(ctx, 0.5, "half way")
		errs <- client.Checkpoint(ctx, map[string]int{"done": 5})
		reported <- step.StepID
		<-proceed
		return nil, errors.New("interrupted")
	}})
	sub, err := g.e.Submit(t.Context(), weft.Submission{Workflow: "shop/resume"})
	require.NoError(t, err)
	var stepID int64
	select {
	case stepID = <-reported:
	case <-time.After(30 * time.Second):
		t.Fatal("the step never ran")
	}
	require.ErrorContains(t, <-errs, "fraction must be from 0 to 1")
	require.NoError(t, <-errs)
	require.NoError(t, <-errs)
	st, err := g.e.Step(t.Context(), stepID)
	require.NoError(t, err)
	require.NotNil(t, st.Progress)
	require.InDelta(t, 0.5, *st.Progress, 1e-9)
	require.Equal(t, "half way", st.ProgressMessage)
	close(proceed)

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	task, err := g.e.Wait(ctx, sub.Task.ID)
	require.NoError(t, err)
	require.Equal(t, state.TaskCompleted, task.State)
	require.Equal(t, 2, task.Steps[0].Attempts)
	require.JSONEq(t, `{"resumed": {"done": 5}}`, string(task.Steps[0].Result), "the second attempt started from the checkpoint")

	require.ErrorContains(t, client.Progress(context.Background(), 0.5, ""), "not a step's context")
	require.ErrorContains(t, client.Checkpoint(context.Background(), 1), "not a step's context")
}

// TestGRPCWorkerPreempted: a full worker running a preemptible step is
// asked, at a heartbeat, to stop it for a step of higher priority: the
// handler's context ends with ErrPreempted, the step goes back to ready
// without a failure, the higher one runs, then the first runs again.
func TestGRPCWorkerPreempted(t *testing.T) {
	t.Parallel()
	g := startGRPCServer(t)
	started := make(chan string, 4)
	causes := make(chan error, 1)
	var held atomic.Bool // the low step was held once
	startWorker(t, g, 1, map[string]client.StepHandler{"remote.hold": func(ctx context.Context, step wire.ClaimedStep) (json.RawMessage, error) {
		var in struct{ Which string }
		if err := json.Unmarshal(step.Input, &in); err != nil {
			return nil, client.Permanent(err)
		}
		started <- in.Which
		if in.Which == "low" && held.CompareAndSwap(false, true) {
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return nil, ctx.Err()
		}
		return json.RawMessage(`"` + in.Which + `"`), nil
	}})
	low, err := g.e.Submit(t.Context(), weft.Submission{Workflow: "shop/hold", Input: map[string]string{"which": "low"}})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	select {
	case which := <-started:
		require.Equal(t, "low", which)
	case <-ctx.Done():
		t.Fatal("the low step never started")
	}
	high, err := g.e.Submit(t.Context(), weft.Submission{Workflow: "shop/hold", Input: map[string]string{"which": "high"}, Priority: 10})
	require.NoError(t, err)
	select {
	case cause := <-causes:
		require.ErrorIs(t, cause, client.ErrPreempted)
	case <-ctx.Done():
		t.Fatal("the low step was never preempted")
	}
	for _, id := range []int64{high.Task.ID, low.Task.ID} {
		task, err := g.e.Wait(ctx, id)
		require.NoError(t, err)
		require.Equal(t, state.TaskCompleted, task.State)
	}
	audit, err := g.e.Audit(ctx, low.Task.ID)
	require.NoError(t, err)
	var preempted bool
	for _, a := range audit {
		preempted = preempted || strings.Contains(a.Reason, "preempted")
		require.NotEqual(t, string(state.StepFailed), a.To, "a preempted step does not fail: %+v", a)
	}
	require.True(t, preempted, "the audit trail says the step was preempted")
}

// TestGRPCWorkerResultThatCannotBeStored: a result the database cannot
// hold (a NUL) fails its step for good, at once, rather than running it
// again and again.
func TestGRPCWorkerResultThatCannotBeStored(t *testing.T) {
	t.Parallel()
	g := startGRPCServer(t)
	startWorker(t, g, 1, map[string]client.StepHandler{"remote.nul": func(context.Context, wire.ClaimedStep) (json.RawMessage, error) {
		return json.RawMessage(`{"v": "a\u0000b"}`), nil
	}})
	task := g.run(t, "shop/nul", nil)
	require.Equal(t, state.TaskFailed, task.State)
	require.Equal(t, 1, task.Steps[0].Attempts)
	require.Contains(t, task.Steps[0].Error, "result cannot be stored")
}

// TestGRPCWorkerSnoozeAndRetryAfter: a handler's Snooze runs the step
// again with the same attempt, and its RetryAfter retries it under the
// step's attempts (two here): snoozed, retried, then completed on its
// second attempt.
func TestGRPCWorkerSnoozeAndRetryAfter(t *testing.T) {
	t.Parallel()
	g := startGRPCServer(t)
	var runs atomic.Int32
	attempts := make(chan int, 3)
	startWorker(t, g, 1, map[string]client.StepHandler{"remote.resume": func(ctx context.Context, step wire.ClaimedStep) (json.RawMessage, error) {
		attempts <- step.Attempt
		switch runs.Add(1) {
		case 1:
			return nil, client.Snooze(20*time.Millisecond, "not yet")
		case 2:
			return nil, client.RetryAfter(20*time.Millisecond, errors.New("flaky"))
		}
		return json.RawMessage(`"done"`), nil
	}})
	sub, err := g.e.Submit(t.Context(), weft.Submission{Workflow: "shop/resume"})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	task, err := g.e.Wait(ctx, sub.Task.ID)
	require.NoError(t, err)
	require.Equal(t, state.TaskCompleted, task.State, "%+v", task.Steps)
	require.Equal(t, []int{1, 1, 2}, []int{<-attempts, <-attempts, <-attempts})
	trail, err := g.e.Audit(t.Context(), sub.Task.ID)
	require.NoError(t, err)
	var reasons []string
	for _, a := range trail {
		if a.Step == "s" && a.From == string(state.StepRunning) {
			reasons = append(reasons, a.Reason)
		}
	}
	require.Equal(t, "not yet (snoozed for 20ms)", reasons[0])
	require.Contains(t, reasons[1], "flaky")
}
