package weft_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/workflow"
)

// TestConcurrencyKeysHold runs tasks of a workflow whose step allows one
// running step per customer and whose tasks run two at a time: with eight
// slots, each limit is reached and none exceeded.
func TestConcurrencyKeysHold(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		e := newEngine(t, open(t), weft.Config{Concurrency: 8})
		var mu sync.Mutex
		perCustomer, peakCustomer := map[string]int{}, map[string]int{}
		tasks, peakTasks := map[int64]bool{}, 0
		release := make(chan struct{})
		e.Handle("charge", func(ctx context.Context, a *weft.Attempt) (any, error) {
			var in struct{ Customer string }
			if err := a.Bind(&in); err != nil {
				return nil, weft.Permanent(err)
			}
			mu.Lock()
			perCustomer[in.Customer]++
			peakCustomer[in.Customer] = max(peakCustomer[in.Customer], perCustomer[in.Customer])
			mu.Unlock()
			if err := hold(ctx, release); err != nil {
				return nil, err
			}
			mu.Lock()
			perCustomer[in.Customer]--
			mu.Unlock()
			return nil, nil
		})
		e.Handle("step", func(ctx context.Context, a *weft.Attempt) (any, error) {
			mu.Lock()
			tasks[a.TaskID] = true
			peakTasks = max(peakTasks, len(tasks))
			mu.Unlock()
			return nil, hold(ctx, release)
		})
		e.Handle("last", func(ctx context.Context, a *weft.Attempt) (any, error) {
			mu.Lock()
			delete(tasks, a.TaskID)
			mu.Unlock()
			return nil, nil
		})
		register(t, e, workflow.New("shop", "charge", "1").
			Step("charge", "charge", workflow.WithConcurrency(1, "input.customer")))
		register(t, e, workflow.New("shop", "batch", "1").WithConcurrency(2, "").
			Step("a", "step").Step("b", "step", workflow.DependsOn("a")).Step("c", "last", workflow.DependsOn("b")))
		var ids []int64
		for range 3 {
			for _, c := range []string{"ada", "bob"} {
				ids = append(ids, submit(t, e, weft.Submission{Workflow: "shop/charge", Input: map[string]string{"customer": c}}).Task.ID)
			}
			ids = append(ids, submit(t, e, weft.Submission{Workflow: "shop/batch"}).Task.ID)
		}
		_, err := e.Submit(t.Context(), weft.Submission{Workflow: "shop/charge", Input: map[string]int{"amount": 1}})
		require.ErrorIs(t, err, weft.ErrInvalid, "a task whose key cannot be computed is refused")
		start(t, e)
		eventually(t, "both customers and two tasks running", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return perCustomer["ada"] == 1 && perCustomer["bob"] == 1 && len(tasks) == 2
		})
		rep, err := e.Policies(t.Context())
		require.NoError(t, err)
		require.Equal(t, []weft.LimitUsage{
			{Key: "step:shop/charge/charge=ada", Limit: 1, Running: 1},
			{Key: "step:shop/charge/charge=bob", Limit: 1, Running: 1},
			{Key: "workflow:shop/batch", Limit: 2, Running: 2},
		}, rep.Limits)
		close(release)
		for _, id := range ids {
			require.Equal(t, state.TaskCompleted, wait(t, e, id).State)
		}
		require.Equal(t, map[string]int{"ada": 1, "bob": 1}, peakCustomer)
		require.Equal(t, 2, peakTasks)
	})
}

// TestFreedLimitWakesTheClaim: a step held back by a full limit runs as
// soon as the outcome that frees the limit is recorded, not at the next
// poll (an hour away here): nothing else would wake the claim loop, as
// that outcome makes no step ready.
func TestFreedLimitWakesTheClaim(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		e := newEngine(t, open(t), weft.Config{Concurrency: 4, PollInterval: time.Hour})
		release := make(chan struct{})
		var ran atomic.Int64
		e.Handle("call", func(ctx context.Context, a *weft.Attempt) (any, error) {
			if ran.Add(1) == 1 {
				return nil, hold(ctx, release)
			}
			return nil, nil
		})
		register(t, e, workflow.New("shop", "call", "1").Step("call", "call", workflow.WithConcurrency(1, "")))
		first := submit(t, e, weft.Submission{Workflow: "shop/call"}).Task.ID
		second := submit(t, e, weft.Submission{Workflow: "shop/call"}).Task.ID
		start(t, e)
		eventually(t, "the first step running", func() bool { return ran.Load() == 1 })
		close(release)
		require.Equal(t, state.TaskCompleted, wait(t, e, first).State)
		require.Equal(t, state.TaskCompleted, wait(t, e, second).State)
	})
}
