package weft_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/workflow"
)

func TestDiamondDataFlow(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		ctx := context.Background()
		e := newEngine(t, open(t), weft.Config{Concurrency: 4})
		e.Handle("add", func(ctx context.Context, a *weft.Attempt) (any, error) {
			var in struct{ N int }
			if err := a.Bind(&in); err != nil {
				return nil, err
			}
			sum := in.N
			for _, raw := range a.Deps {
				var d struct{ Sum int }
				if err := json.Unmarshal(raw, &d); err != nil {
					return nil, err
				}
				sum += d.Sum
			}
			var cfg struct{ Add int }
			if len(a.Config) > 0 {
				_ = json.Unmarshal(a.Config, &cfg)
			}
			return map[string]any{"sum": sum + cfg.Add, "deps": len(a.Deps), "attempt": a.Number}, nil
		})
		w := workflow.New("test", "diamond", "1").
			Step("a", "add").
			Step("b", "add", workflow.DependsOn("a"), workflow.WithConfig(map[string]int{"add": 10})).
			Step("c", "add", workflow.DependsOn("a"), workflow.WithConfig(map[string]int{"add": 100})).
			Step("d", "add", workflow.DependsOn("b", "c"))
		require.NoError(t, e.Register(ctx, w))
		start(t, e)
		res := submit(t, e, weft.Submission{Workflow: "test/diamond", Input: map[string]int{"n": 1}})
		task := wait(t, e, res.Task.ID)
		require.Equal(t, state.TaskCompleted, task.State, task.Error)
		// a = 1; b = 1+1+10 = 12; c = 1+1+100 = 102; d = 1+12+102 = 115
		require.JSONEq(t, `{"sum":115,"deps":2,"attempt":1}`, string(stepByName(t, task, "d").Result))
		require.Equal(t, []string{"b", "c"}, stepByName(t, task, "d").DependsOn)
		for _, s := range task.Steps {
			require.Equal(t, state.StepCompleted, s.State, s.Name)
			require.Equal(t, 1, s.Attempts, s.Name)
		}
	})
}

func register(t *testing.T, e *weft.Engine, w *workflow.Workflow) {
	t.Helper()
	require.NoError(t, e.Register(context.Background(), w))
}

func TestCancelStopsRunningHandlers(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		ctx := context.Background()
		e := newEngine(t, open(t), weft.Config{})
		started := make(chan struct{})
		stopped := make(chan error, 1)
		e.Handle("block", func(ctx context.Context, a *weft.Attempt) (any, error) {
			close(started)
			<-ctx.Done()
			stopped <- context.Cause(ctx)
			return nil, ctx.Err()
		})
		e.Handle("ok", func(ctx context.Context, a *weft.Attempt) (any, error) { return "ok", nil })
		register(t, e, workflow.New("test", "cancel", "1").Step("block", "block").Step("after", "ok", workflow.DependsOn("block")))
		start(t, e)
		id := submit(t, e, weft.Submission{Workflow: "test/cancel"}).Task.ID
		<-started
		require.NoError(t, e.Cancel(ctx, id))
		// The engine cancels the handler itself, or its heartbeat finds the
		// lease gone first: either way the handler's context ends.
		require.ErrorContains(t, <-stopped, "cancelled")
		task := wait(t, e, id)
		require.Equal(t, state.TaskCancelled, task.State)
		for _, s := range task.Steps {
			require.Equal(t, state.StepCancelled, s.State, s.Name)
		}
		require.ErrorIs(t, e.Cancel(ctx, id), weft.ErrConflict)
		require.ErrorIs(t, e.Cancel(ctx, 999999), weft.ErrNotFound)
	})
}

func TestIdempotentSubmission(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		ctx := context.Background()
		e := newEngine(t, open(t), weft.Config{})
		strict := workflow.New("test", "strict", "1").Step("s", "h")
		strict.Identity = workflow.IdentityStrict
		caller := workflow.New("test", "caller", "1").Step("s", "h")
		caller.Identity = workflow.IdentityCaller
		register(t, e, strict)
		register(t, e, caller)
		register(t, e, workflow.New("test", "unique", "1").Step("s", "h"))

		// strict: the same input, whatever its key order, is one task.
		a := submit(t, e, weft.Submission{Workflow: "test/strict", Input: json.RawMessage(`{"a":1,"b":[1,2]}`)})
		b := submit(t, e, weft.Submission{Workflow: "test/strict", Input: json.RawMessage(`{ "b":[1,2], "a":1 }`)})
		c := submit(t, e, weft.Submission{Workflow: "test/strict", Input: json.RawMessage(`{"a":2}`)})
		require.False(t, a.Duplicate)
		require.True(t, b.Duplicate)
		require.Equal(t, a.Task.ID, b.Task.ID)
		require.NotEqual(t, a.Task.ID, c.Task.ID)

		// caller: a key is required and deduplicates.
		_, err := e.Submit(ctx, weft.Submission{Workflow: "test/caller"})
		require.ErrorIs(t, err, weft.ErrInvalid)
		require.ErrorContains(t, err, "idempotency key is required")
		k1 := submit(t, e, weft.Submission{Workflow: "test/caller", Key: "order-1"})
		k2 := submit(t, e, weft.Submission{Workflow: "test/caller", Key: "order-1", Input: map[string]int{"other": 1}})
		require.True(t, k2.Duplicate)
		require.Equal(t, k1.Task.ID, k2.Task.ID)

		// unique: every submission runs unless a key is given.
		u1 := submit(t, e, weft.Submission{Workflow: "test/unique"})
		u2 := submit(t, e, weft.Submission{Workflow: "test/unique"})
		require.NotEqual(t, u1.Task.ID, u2.Task.ID)

		// bad submissions never insert anything.
		_, err = e.Submit(ctx, weft.Submission{Workflow: "test/unique", Input: json.RawMessage(`{"a":`)})
		require.ErrorIs(t, err, weft.ErrInvalid)
		_, err = e.Submit(ctx, weft.Submission{Workflow: "nope"})
		require.ErrorIs(t, err, weft.ErrInvalid)
		for _, p := range []int{weft.MaxPriority + 1, -weft.MaxPriority - 1} {
			_, err = e.Submit(ctx, weft.Submission{Workflow: "test/unique", Priority: p})
			require.ErrorIs(t, err, weft.ErrInvalid, "priority %d", p)
		}
		_, err = e.Submit(ctx, weft.Submission{Workflow: "test/missing"})
		require.ErrorIs(t, err, weft.ErrNotFound)
		_, err = e.SubmitMany(ctx, []weft.Submission{{Workflow: "test/unique"}, {Workflow: "test/missing"}})
		require.ErrorContains(t, err, "submission 2")
		tasks, err := e.List(ctx, weft.TaskFilter{Workflow: "unique"})
		require.NoError(t, err)
		require.Len(t, tasks, 2)
	})
}

func TestNamespaceCapHolds(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		e := newEngine(t, open(t), weft.Config{Concurrency: 8})
		register(t, e, workflow.New("capped", "w", "1").Step("s", "h"))
		two := 2
		_, err := e.SetLimits(t.Context(), "capped", weft.Limits{Concurrency: &two}, weft.Operator{Actor: "test"})
		require.NoError(t, err)
		var mu sync.Mutex
		running, peak := map[string]int{}, map[string]int{}
		release := make(chan struct{})
		e.Handle("h", func(ctx context.Context, a *weft.Attempt) (any, error) {
			ns, _, _ := strings.Cut(a.Workflow, "/")
			mu.Lock()
			running[ns]++
			peak[ns] = max(peak[ns], running[ns])
			mu.Unlock()
			if err := hold(ctx, release); err != nil {
				return nil, err
			}
			mu.Lock()
			running[ns]--
			mu.Unlock()
			return nil, nil
		})
		register(t, e, workflow.New("free", "w", "1").Step("s", "h"))
		var ids []int64
		for range 6 {
			ids = append(ids, submit(t, e, weft.Submission{Workflow: "capped/w"}).Task.ID)
			ids = append(ids, submit(t, e, weft.Submission{Workflow: "free/w"}).Task.ID)
		}
		start(t, e)
		eventually(t, "8 handlers running", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return running["capped"]+running["free"] == 8
		})
		mu.Lock()
		require.Equal(t, 2, running["capped"], "the cap holds while slots are free")
		require.Equal(t, 6, running["free"])
		mu.Unlock()
		close(release)
		for _, id := range ids {
			require.Equal(t, state.TaskCompleted, wait(t, e, id).State)
		}
		require.Equal(t, 2, peak["capped"])
	})
}

func TestPriorityOrdersClaims(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		e := newEngine(t, open(t), weft.Config{Concurrency: 1})
		var mu sync.Mutex
		var order []int
		e.Handle("h", func(ctx context.Context, a *weft.Attempt) (any, error) {
			var in struct{ P int }
			_ = a.Bind(&in)
			mu.Lock()
			order = append(order, in.P)
			mu.Unlock()
			return nil, nil
		})
		register(t, e, workflow.New("test", "prio", "1").Step("s", "h"))
		var ids []int64
		for _, p := range []int{1, 5, 3, 9, 0} {
			ids = append(ids, submit(t, e, weft.Submission{Workflow: "test/prio", Priority: p, Input: map[string]int{"p": p}}).Task.ID)
		}
		start(t, e)
		for _, id := range ids {
			wait(t, e, id)
		}
		require.Equal(t, []int{9, 5, 3, 1, 0}, order)
	})
}

func TestExpiry(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		e := newEngine(t, open(t), weft.Config{})
		// No engine serves "elsewhere", so its steps are never claimed.
		register(t, e, workflow.New("test", "ttl", "1").Step("s", "elsewhere", workflow.WithTTL(50*time.Millisecond)))
		register(t, e, workflow.New("test", "late", "1").Step("s", "elsewhere"))
		start(t, e)
		ttl := submit(t, e, weft.Submission{Workflow: "test/ttl"}).Task.ID
		late := submit(t, e, weft.Submission{Workflow: "test/late", GoodUntil: time.Now().Add(50 * time.Millisecond)}).Task.ID
		task := wait(t, e, ttl)
		require.Equal(t, state.TaskFailed, task.State)
		require.Equal(t, state.StepExpired, task.Steps[0].State)
		task = wait(t, e, late)
		require.Equal(t, state.TaskExpired, task.State)
		require.Equal(t, state.StepExpired, task.Steps[0].State)
	})
}

func TestDeferUntilReleasesSlot(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		ctx := context.Background()
		e := newEngine(t, open(t), weft.Config{Concurrency: 1})
		gate := make(chan struct{})
		deferred := make(chan struct{})
		e.Handle("waits", func(ctx context.Context, a *weft.Attempt) (any, error) {
			first := true
			err := a.DeferUntil(ctx, func(context.Context) (bool, error) {
				if first {
					first = false
					close(deferred)
				}
				select {
				case <-gate:
					return true, nil
				default:
					return false, nil
				}
			}, 5*time.Millisecond)
			return "waited", err
		})
		e.Handle("quick", func(ctx context.Context, a *weft.Attempt) (any, error) { return "quick", nil })
		register(t, e, workflow.New("test", "waits", "1").Step("s", "waits"))
		register(t, e, workflow.New("test", "quick", "1").Step("s", "quick"))
		start(t, e)
		waiting := submit(t, e, weft.Submission{Workflow: "test/waits"}).Task.ID
		<-deferred
		eventually(t, "deferred sub-status", func() bool {
			task, err := e.Get(ctx, waiting)
			require.NoError(t, err)
			return task.Steps[0].Sub == state.SubDeferred
		})
		// The only slot is free while the first handler waits.
		quick := wait(t, e, submit(t, e, weft.Submission{Workflow: "test/quick"}).Task.ID)
		require.Equal(t, state.TaskCompleted, quick.State)
		task, err := e.Get(ctx, waiting)
		require.NoError(t, err)
		require.Equal(t, state.StepRunning, task.Steps[0].State)
		close(gate)
		task = wait(t, e, waiting)
		require.Equal(t, state.TaskCompleted, task.State)
		require.Empty(t, task.Steps[0].Sub)
	})
}

func TestSnoozeSurvivesRestart(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		ctx := context.Background()
		s := open(t)
		handler := func(ctx context.Context, a *weft.Attempt) (any, error) {
			if a.Checkpoint == nil {
				if err := a.SaveCheckpoint(ctx, map[string]bool{"snoozed": true}); err != nil {
					return nil, err
				}
				return nil, weft.Snooze(300 * time.Millisecond)
			}
			return map[string]int{"attempt": a.Number}, nil
		}
		first := newEngine(t, s, weft.Config{ID: "first"})
		first.Handle("h", handler)
		register(t, first, workflow.New("test", "snooze", "1").Step("s", "h"))
		require.NoError(t, first.Start(ctx))
		id := submit(t, first, weft.Submission{Workflow: "test/snooze"}).Task.ID
		eventually(t, "the step to snooze", func() bool {
			task, err := first.Get(ctx, id)
			require.NoError(t, err)
			return task.Steps[0].State == state.StepWaiting
		})
		require.NoError(t, first.Stop(ctx))

		second := newEngine(t, s, weft.Config{ID: "second"})
		second.Handle("h", handler)
		start(t, second)
		task := wait(t, second, id)
		require.Equal(t, state.TaskCompleted, task.State)
		require.JSONEq(t, `{"attempt":1}`, string(task.Steps[0].Result), "a snooze gives its attempt back")
		audit, err := second.Audit(ctx, id)
		require.NoError(t, err)
		last := audit[len(audit)-2]
		require.Equal(t, "completed", last.To)
		require.Equal(t, "second", last.EngineID)
	})
}

func TestStopDrainsRunningHandlers(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		ctx := context.Background()
		e := newEngine(t, open(t), weft.Config{})
		started := make(chan struct{})
		e.Handle("h", func(ctx context.Context, a *weft.Attempt) (any, error) {
			close(started)
			time.Sleep(50 * time.Millisecond) // work in progress, not a wait for async work
			return "done", nil
		})
		register(t, e, workflow.New("test", "drain", "1").Step("s", "h"))
		require.NoError(t, e.Start(ctx))
		id := submit(t, e, weft.Submission{Workflow: "test/drain"}).Task.ID
		<-started
		stopCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		require.NoError(t, e.Stop(stopCtx))
		task, err := e.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, state.TaskCompleted, task.State, "the running handler finished and its outcome was recorded")
	})
}

func TestShutdownDeadlineLeavesWorkToReclaim(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		ctx := context.Background()
		s := open(t)
		first := newEngine(t, s, weft.Config{ID: "first"})
		started := make(chan struct{})
		first.Handle("h", func(ctx context.Context, a *weft.Attempt) (any, error) {
			if a.Number == 1 {
				close(started)
				<-ctx.Done()
				return nil, ctx.Err()
			}
			return "second attempt", nil
		})
		register(t, first, workflow.New("test", "abandon", "1").Step("s", "h"))
		require.NoError(t, first.Start(ctx))
		id := submit(t, first, weft.Submission{Workflow: "test/abandon"}).Task.ID
		<-started
		stopCtx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		defer cancel()
		require.NoError(t, first.Stop(stopCtx))
		task, err := first.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, state.StepRunning, task.Steps[0].State, "an interrupted step is left to be reclaimed, not failed")

		// A new engine reclaims it at start-up, without waiting for the lease.
		second := newEngine(t, s, weft.Config{ID: "second", LeaseTTL: time.Hour, HeartbeatInterval: time.Minute})
		second.Handle("h", func(ctx context.Context, a *weft.Attempt) (any, error) { return "second attempt", nil })
		start(t, second)
		task = wait(t, second, id)
		require.Equal(t, state.TaskCompleted, task.State)
		require.Equal(t, 2, task.Steps[0].Attempts)
	})
}

func TestRetryFailedTask(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		ctx := context.Background()
		e := newEngine(t, open(t), weft.Config{})
		var fail atomic.Bool
		fail.Store(true)
		e.Handle("ok", func(ctx context.Context, a *weft.Attempt) (any, error) { return "ok", nil })
		e.Handle("maybe", func(ctx context.Context, a *weft.Attempt) (any, error) {
			if fail.Load() {
				return nil, weft.Permanent(errors.New("not yet"))
			}
			return "fixed", nil
		})
		register(t, e, workflow.New("test", "retry-task", "1").Step("a", "ok").Step("b", "maybe", workflow.DependsOn("a")).Step("c", "ok", workflow.DependsOn("b")))
		start(t, e)
		id := submit(t, e, weft.Submission{Workflow: "test/retry-task"}).Task.ID
		require.Equal(t, state.TaskFailed, wait(t, e, id).State)
		fail.Store(false)
		require.NoError(t, e.Retry(ctx, id))
		task := wait(t, e, id)
		require.Equal(t, state.TaskCompleted, task.State)
		require.Equal(t, 1, stepByName(t, task, "a").Attempts, "completed steps are not run again")
		require.ErrorIs(t, e.Retry(ctx, id), weft.ErrConflict)
	})
}

func TestFencingRefusesStaleCompletion(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		ctx := context.Background()
		s := open(t)
		// A slow engine claims the step and is then declared dead; a second
		// engine takes it over and finishes it. The slow one's late result
		// must be refused.
		slow := newEngine(t, s, weft.Config{ID: "slow", Concurrency: 1, HeartbeatInterval: time.Hour, LeaseTTL: 2 * time.Hour})
		started, finish := make(chan struct{}), make(chan struct{})
		slowDone := make(chan struct{})
		slow.Handle("h", func(ctx context.Context, a *weft.Attempt) (any, error) {
			close(started)
			<-finish
			defer close(slowDone)
			return "stale result", nil
		})
		register(t, slow, workflow.New("test", "fence", "1").Step("s", "h"))
		require.NoError(t, slow.Start(ctx))
		t.Cleanup(func() { slow.Stop(context.Background()) })
		id := submit(t, slow, weft.Submission{Workflow: "test/fence"}).Task.ID
		<-started
		_, err := s.Reap(ctx, time.Now(), time.Now().Add(-time.Hour), []string{"slow"}, "test")
		require.NoError(t, err)

		fast := newEngine(t, s, weft.Config{ID: "fast"})
		fast.Handle("h", func(ctx context.Context, a *weft.Attempt) (any, error) { return "fresh result", nil })
		start(t, fast)
		task := wait(t, fast, id)
		require.Equal(t, state.TaskCompleted, task.State)
		close(finish)
		<-slowDone
		// Let the slow engine try to record its result: stopping it flushes its outcomes.
		require.NoError(t, slow.Stop(ctx))
		task, err = fast.Get(ctx, id)
		require.NoError(t, err)
		require.JSONEq(t, `"fresh result"`, string(task.Steps[0].Result))
		require.Equal(t, 2, task.Steps[0].Attempts)
		audit, err := fast.Audit(ctx, id)
		require.NoError(t, err)
		require.Equal(t, []string{"fast"}, completedBy(audit), "the outcome is recorded once, by the engine that took the step over")
	})
}

func TestTaskStaysOnItsVersion(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		e := newEngine(t, open(t), weft.Config{})
		e.Handle("v", func(ctx context.Context, a *weft.Attempt) (any, error) { return a.Workflow + " " + a.Step, nil })
		register(t, e, workflow.New("test", "versions", "1.9").Step("old", "v"))
		first := submit(t, e, weft.Submission{Workflow: "test/versions"})
		register(t, e, workflow.New("test", "versions", "1.10").Step("new", "v").Step("newer", "v", workflow.DependsOn("new")))
		latest := submit(t, e, weft.Submission{Workflow: "test/versions"})
		pinned := submit(t, e, weft.Submission{Workflow: "test/versions@1.9"})
		_, err := e.Submit(context.Background(), weft.Submission{Workflow: "test/versions@2"})
		require.ErrorIs(t, err, weft.ErrNotFound)
		// Redefining a registered version is refused; the same definition is fine.
		require.ErrorIs(t, e.Register(context.Background(), workflow.New("test", "versions", "1.9").Step("changed", "v")), weft.ErrConflict)
		register(t, e, workflow.New("test", "versions", "1.9").Step("old", "v"))
		start(t, e)
		for _, tc := range []struct {
			id      int64
			version string
			last    string
		}{{first.Task.ID, "1.9", "old"}, {latest.Task.ID, "1.10", "newer"}, {pinned.Task.ID, "1.9", "old"}} {
			task := wait(t, e, tc.id)
			require.Equal(t, state.TaskCompleted, task.State)
			require.Equal(t, tc.version, task.Version)
			last := task.Steps[len(task.Steps)-1]
			require.Equal(t, `"test/versions@`+tc.version+` `+tc.last+`"`, string(last.Result))
		}
	})
}

func TestHandlerRegisteredWhileRunning(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		e := newEngine(t, open(t), weft.Config{})
		register(t, e, workflow.New("test", "late", "1").Step("s", "late"))
		start(t, e)
		id := submit(t, e, weft.Submission{Workflow: "test/late"}).Task.ID
		e.Handle("late", func(ctx context.Context, a *weft.Attempt) (any, error) { return "served", nil })
		require.Equal(t, state.TaskCompleted, wait(t, e, id).State)
	})
}

func TestEngineDeclaredDeadDropsWorkAndRejoins(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		ctx := context.Background()
		s := open(t)
		e := newEngine(t, s, weft.Config{ID: "stalled", HeartbeatInterval: 20 * time.Millisecond, LeaseTTL: time.Hour})
		started := make(chan struct{})
		dropped := make(chan error, 1)
		e.Handle("h", func(ctx context.Context, a *weft.Attempt) (any, error) {
			if a.Number == 1 {
				close(started)
				<-ctx.Done()
				dropped <- context.Cause(ctx)
				return nil, ctx.Err()
			}
			return "second attempt", nil
		})
		register(t, e, workflow.New("test", "dead", "1").Step("s", "h"))
		start(t, e)
		id := submit(t, e, weft.Submission{Workflow: "test/dead"}).Task.ID
		<-started
		// Another engine's reaper decides this one is dead.
		n, err := s.Reap(ctx, time.Now(), time.Now().Add(-time.Hour), []string{"stalled"}, "other")
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.ErrorContains(t, <-dropped, "lease lost")
		task := wait(t, e, id)
		require.Equal(t, state.TaskCompleted, task.State)
		require.Equal(t, 2, task.Steps[0].Attempts)
		require.NotEqual(t, "stalled", e.ID(), "the engine registered under a new identity")
		require.Equal(t, e.ID(), task.Steps[0].EngineID)
	})
}
