package weft_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/workflow"
)

// drainConfig is an engine with a short lease, so that a step outlives
// several of them, and a short maintenance lease, so that another engine
// leads (and reaps) soon after this one stops its maintenance.
func drainConfig(id string) weft.Config {
	return weft.Config{
		ID:                id,
		Concurrency:       1,
		HeartbeatInterval: 100 * time.Millisecond,
		LeaseTTL:          1500 * time.Millisecond, // 15 heartbeats: a loaded machine misses a few
		PollInterval:      50 * time.Millisecond,
		LeaderTTL:         150 * time.Millisecond,
	}
}

// TestStopKeepsLeasesWhileDraining: an engine told to stop while a step
// runs for several lease TTLs keeps heartbeating until the handler
// returns and its outcome is recorded. Another engine on the same store,
// leading maintenance meanwhile, never reaps or claims the step; the
// outcome of the first is recorded once; the audit shows no lapsed lease.
func TestStopKeepsLeasesWhileDraining(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		ctx := context.Background()
		s := open(t)
		cfg := drainConfig("draining")
		first := newEngine(t, s, cfg)
		started := make(chan struct{})
		first.Handle("long", func(ctx context.Context, a *weft.Attempt) (any, error) {
			close(started)
			// The work itself lasts three lease TTLs.
			select {
			case <-time.After(3 * cfg.LeaseTTL):
				return "first", nil
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			}
		})
		register(t, first, workflow.New("test", "drain", "1").Step("s", "long"))
		require.NoError(t, first.Start(ctx))
		id := submit(t, first, weft.Submission{Workflow: "test/drain"}).Task.ID
		<-started

		stopped := make(chan error, 1)
		go func() {
			stopCtx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			stopped <- first.Stop(stopCtx)
		}()
		eventually(t, "the first engine to drain", func() bool { return !first.Running() })

		var secondRuns atomic.Int32
		second := newEngine(t, s, drainConfig("second"))
		second.Handle("long", func(context.Context, *weft.Attempt) (any, error) {
			secondRuns.Add(1)
			return "second", nil
		})
		start(t, second)

		require.NoError(t, <-stopped)
		task := wait(t, second, id)
		require.Equal(t, state.TaskCompleted, task.State)
		require.Zero(t, secondRuns.Load(), "the second engine ran a step the draining one still ran")
		require.JSONEq(t, `"first"`, string(task.Steps[0].Result))
		require.Equal(t, 1, task.Steps[0].Attempts)

		audit, err := second.Audit(ctx, id)
		require.NoError(t, err)
		for _, a := range audit {
			require.NotContains(t, a.Reason, "lease lapsed", "audit entry %+v", a)
		}
		require.Equal(t, []string{"draining"}, completedBy(audit), "the outcome is recorded once, by the draining engine")
	})
}

// TestCancelReachesDrainingEngine: a task cancelled from elsewhere (another
// process, here an engine that is not started) while its step's engine
// drains cancels the handler's context; the engine then stops without
// waiting out the step or its deadline.
func TestCancelReachesDrainingEngine(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		ctx := context.Background()
		s := open(t)
		first := newEngine(t, s, drainConfig("draining"))
		started := make(chan struct{})
		cause := make(chan error, 1)
		first.Handle("long", func(ctx context.Context, a *weft.Attempt) (any, error) {
			close(started)
			select {
			case <-ctx.Done():
				cause <- context.Cause(ctx)
				return nil, ctx.Err()
			case <-time.After(time.Minute):
				cause <- nil
				return "not cancelled", nil
			}
		})
		register(t, first, workflow.New("test", "drain-cancel", "1").Step("s", "long"))
		require.NoError(t, first.Start(ctx))
		id := submit(t, first, weft.Submission{Workflow: "test/drain-cancel"}).Task.ID
		<-started

		stopped := make(chan error, 1)
		go func() {
			stopCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			defer cancel()
			stopped <- first.Stop(stopCtx)
		}()
		eventually(t, "the first engine to drain", func() bool { return !first.Running() })

		operator := newEngine(t, s, weft.Config{ID: "operator"})
		require.NoError(t, operator.Cancel(ctx, id))

		select {
		case err := <-cause:
			require.Error(t, err, "the handler ran to its end: the cancel never reached it")
			require.True(t, strings.Contains(err.Error(), "cancel"), "cause %v", err)
		case <-time.After(30 * time.Second):
			t.Fatal("the cancel did not reach the draining engine's handler")
		}
		require.NoError(t, <-stopped)
		task, err := operator.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, state.TaskCancelled, task.State)
	})
}

// TestSecondStopCutsDrainShort: a Stop whose context ends while an earlier
// one drains ends that drain: the running handler is cancelled, both calls
// return once the engine stopped, and the engine is no longer listed live,
// so what it left is reclaimed at once.
func TestSecondStopCutsDrainShort(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		ctx := context.Background()
		s := open(t)
		e := newEngine(t, s, drainConfig("hurried"))
		started := make(chan struct{})
		e.Handle("long", func(ctx context.Context, a *weft.Attempt) (any, error) {
			close(started)
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(time.Minute):
				return "not cancelled", nil
			}
		})
		register(t, e, workflow.New("test", "hurry", "1").Step("s", "long"))
		require.NoError(t, e.Start(ctx))
		submit(t, e, weft.Submission{Workflow: "test/hurry"})
		<-started

		first := make(chan error, 1)
		go func() {
			stopCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			defer cancel()
			first <- e.Stop(stopCtx)
		}()
		eventually(t, "the engine to drain", func() bool { return !e.Running() })

		hurry, cancel := context.WithCancel(ctx)
		cancel()
		second := make(chan error, 1)
		go func() { second <- e.Stop(hurry) }()
		for _, ch := range []chan error{first, second} {
			select {
			case err := <-ch:
				require.NoError(t, err)
			case <-time.After(30 * time.Second):
				t.Fatal("the second Stop did not cut the drain short")
			}
		}
		live, err := s.ListEngines(ctx)
		require.NoError(t, err)
		for _, info := range live {
			require.NotEqual(t, "hurried", info.ID, "a stopped engine is listed live")
		}
	})
}

// TestStopLeavesAHandlerThatIgnoresCancellation: a handler that ignores
// its context does not hold Stop forever. Stop returns
// ErrHandlersAbandoned; another engine reruns the step at once (the first
// is marked stopped); and what the abandoned handler returns later is not
// recorded.
func TestStopLeavesAHandlerThatIgnoresCancellation(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		ctx := context.Background()
		s := open(t)
		first := newEngine(t, s, drainConfig("stubborn"))
		started, release, returned := make(chan struct{}), make(chan struct{}), make(chan struct{})
		first.Handle("h", func(context.Context, *weft.Attempt) (any, error) {
			defer close(returned)
			close(started)
			<-release // ignores its context
			return "abandoned", nil
		})
		register(t, first, workflow.New("test", "stubborn", "1").Step("s", "h"))
		require.NoError(t, first.Start(ctx))
		id := submit(t, first, weft.Submission{Workflow: "test/stubborn"}).Task.ID
		<-started

		stopped := make(chan error, 1)
		go func() {
			stopCtx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			defer cancel()
			stopped <- first.Stop(stopCtx)
		}()
		select {
		case err := <-stopped:
			require.ErrorIs(t, err, weft.ErrHandlersAbandoned)
			require.ErrorContains(t, err, "1 handler(s)")
		case <-time.After(time.Minute):
			t.Fatal("Stop waited for a handler that ignores its cancellation")
		}

		second := newEngine(t, s, drainConfig("second"))
		second.Handle("h", func(context.Context, *weft.Attempt) (any, error) { return "rerun", nil })
		start(t, second)
		task := wait(t, second, id)
		require.Equal(t, state.TaskCompleted, task.State)
		require.JSONEq(t, `"rerun"`, string(task.Steps[0].Result))

		close(release)
		<-returned
		task, err := second.Get(ctx, id)
		require.NoError(t, err)
		require.JSONEq(t, `"rerun"`, string(task.Steps[0].Result), "the abandoned handler's late result was recorded")
	})
}
