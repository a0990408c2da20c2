package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/client"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/wire"
	"github.com/weftrun/weft/workflow"
)

// TestGRPCWorkerFunction: a durable function on a Go remote worker over
// gRPC: parallel steps, a sleep, a signal and a child task; each call's
// code runs once; a failed call the function passes on fails its task.
func TestGRPCWorkerFunction(t *testing.T) {
	t.Parallel()
	g := startGRPCServer(t)
	ctx := t.Context()
	fnStep := func(s *workflow.Step) { s.Type = workflow.StepFunction }
	require.NoError(t, g.e.Register(ctx, workflow.New("shop", "checkout", "1").Step("function", "go.checkout", fnStep)))
	require.NoError(t, g.e.Register(ctx, workflow.New("shop", "refund", "1").Step("function", "go.refund", fnStep)))
	var mu sync.Mutex
	ran := map[string]int{}
	count := func(name string) {
		mu.Lock()
		defer mu.Unlock()
		ran[name]++
	}
	w, err := client.NewGRPCWorker(client.WorkerConfig{URL: g.hs.URL, Token: g.admin, Slots: 4, MinBackoff: 10 * time.Millisecond,
		MaxBackoff: 100 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	w.Handle("remote.ok", func(_ context.Context, step wire.ClaimedStep) (json.RawMessage, error) {
		return json.RawMessage(`{"seen":` + string(step.Input) + `}`), nil
	})
	w.HandleFunction("go.checkout", func(f *client.FunctionRun, input json.RawMessage) (any, error) {
		charge, err := f.Step("charge", func(context.Context) (any, error) { count("charge"); return "ch_1", nil }, client.CallOptions{MaxAttempts: 2})
		if err != nil {
			return nil, err
		}
		a := f.Go("tax", func(context.Context) (any, error) { count("tax"); return 10, nil })
		b := f.Go("fee", func(context.Context) (any, error) { count("fee"); return 1, nil })
		if _, err := a.Wait(); err != nil {
			return nil, err
		}
		if _, err := b.Wait(); err != nil {
			return nil, err
		}
		if err := f.Sleep(20 * time.Millisecond); err != nil {
			return nil, err
		}
		ok, err := f.WaitSignal("approval", time.Minute)
		if err != nil {
			return nil, err
		}
		child, err := f.Child("shop/ok", map[string]int{"n": 1})
		if err != nil {
			return nil, err
		}
		return map[string]json.RawMessage{"charge": charge, "approval": ok, "child": child}, nil
	})
	w.HandleFunction("go.refund", func(f *client.FunctionRun, input json.RawMessage) (any, error) {
		_, err := f.Step("refund", func(context.Context) (any, error) { return nil, errors.New("declined") }, client.CallOptions{MaxAttempts: 1})
		var ce *client.CallError
		if !errors.As(err, &ce) {
			return nil, errors.New("want a CallError")
		}
		return nil, err
	})
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})

	sub, err := g.e.Submit(ctx, weft.Submission{Workflow: "shop/checkout"})
	require.NoError(t, err)
	_, err = g.e.Signal(ctx, sub.Task.ID, "approval", true)
	require.NoError(t, err)
	waitCtx, stop := context.WithTimeout(ctx, 30*time.Second)
	defer stop()
	task, err := g.e.Wait(waitCtx, sub.Task.ID)
	require.NoError(t, err)
	require.Equal(t, state.TaskCompleted, task.State, "%+v", task.Steps)
	require.JSONEq(t, `{"charge":"ch_1","approval":true,"child":{"s":{"seen":{"n":1}}}}`, string(task.Steps[0].Result))
	mu.Lock()
	require.Equal(t, map[string]int{"charge": 1, "tax": 1, "fee": 1}, ran)
	mu.Unlock()

	failed := g.run(t, "shop/refund", nil)
	require.Equal(t, state.TaskFailed, failed.State)
	require.Contains(t, failed.Steps[0].Error, `call "refund" failed: declined`)
}
