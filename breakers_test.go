package weft_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/workflow"
)

// TestCircuitBreakerEndToEnd: two failures in a row open the breaker of a
// step; work submitted meanwhile waits; after the cooldown exactly one
// probe runs, its success closes the breaker and the held work flows. The
// history tells the breaker's transitions. Two engines share the
// database: the probe is one across both.
func TestCircuitBreakerEndToEnd(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		s := open(t)
		e := newEngine(t, s, weft.Config{ID: "first", Concurrency: 4})
		other := newEngine(t, s, weft.Config{ID: "second", Concurrency: 4})
		var failing atomic.Bool
		failing.Store(true)
		var mu sync.Mutex
		seen := map[string]int{} // the breaker's state each successful call saw
		pay := func(ctx context.Context, a *weft.Attempt) (any, error) {
			if failing.Load() {
				return nil, weft.Permanent(errors.New("provider down"))
			}
			bs, err := e.Breakers(ctx)
			if err != nil {
				return nil, err
			}
			st := weft.BreakerClosed
			for _, b := range bs {
				if b.Key == "shop/pay/call" {
					st = b.State
				}
			}
			mu.Lock()
			seen[st]++
			mu.Unlock()
			return nil, nil
		}
		for _, en := range []*weft.Engine{e, other} {
			en.Handle("pay", pay)
			register(t, en, workflow.New("shop", "pay", "1").
				Step("call", "pay", workflow.WithCircuitBreaker(2, 200*time.Millisecond)))
			start(t, en)
		}
		for range 2 {
			id := submit(t, e, weft.Submission{Workflow: "shop/pay"}).Task.ID
			require.Equal(t, state.TaskFailed, wait(t, e, id).State)
		}
		bs, err := e.Breakers(t.Context())
		require.NoError(t, err)
		require.Len(t, bs, 1)
		require.Equal(t, weft.BreakerOpen, bs[0].State)
		require.Equal(t, 2, bs[0].Failures)

		failing.Store(false)
		var ids []int64
		for range 5 {
			ids = append(ids, submit(t, e, weft.Submission{Workflow: "shop/pay"}).Task.ID)
		}
		for _, id := range ids {
			require.Equal(t, state.TaskCompleted, wait(t, e, id).State)
		}
		mu.Lock()
		require.Equal(t, map[string]int{weft.BreakerHalfOpen: 1, weft.BreakerClosed: 4}, seen,
			"one probe while half-open, the rest once it closed; none while open")
		mu.Unlock()
		bs, err = e.Breakers(t.Context())
		require.NoError(t, err)
		require.Equal(t, weft.BreakerClosed, bs[0].State)
		require.Zero(t, bs[0].Failures)

		// The history (and so SSE and webhooks) tells the transitions.
		var types []string
		eventually(t, "the breaker's events in the history", func() bool {
			events, err := e.History(t.Context(), weft.HistoryQuery{Workflow: "shop/pay", Limit: 1000})
			require.NoError(t, err)
			types = types[:0]
			for _, ev := range events {
				if slices.Contains(weft.EventTypes, ev.Type) && len(ev.Type) > 8 && ev.Type[:8] == "breaker." {
					types = append(types, ev.Type)
				}
			}
			return len(types) == 3
		})
		require.Equal(t, []string{"breaker.opened", "breaker.probing", "breaker.closed"}, types)
	})
}

// TestClosedBreakerWakesTheClaim: once a probe's success closes a breaker,
// the steps it held run at once, not at the next poll (an hour away here):
// the probe's outcome makes no step ready, so only the recorded outcome
// wakes the claim loop.
func TestClosedBreakerWakesTheClaim(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		e := newEngine(t, open(t), weft.Config{Concurrency: 4, PollInterval: time.Hour})
		var failing atomic.Bool
		failing.Store(true)
		e.Handle("pay", func(ctx context.Context, a *weft.Attempt) (any, error) {
			if failing.Load() {
				return nil, weft.Permanent(errors.New("provider down"))
			}
			return nil, nil
		})
		e.Handle("other", func(ctx context.Context, a *weft.Attempt) (any, error) { return nil, nil })
		cooldown := 100 * time.Millisecond
		register(t, e, workflow.New("shop", "pay", "1").Step("call", "pay", workflow.WithCircuitBreaker(1, cooldown)))
		register(t, e, workflow.New("shop", "other", "1").Step("s", "other"))
		start(t, e)
		first := submit(t, e, weft.Submission{Workflow: "shop/pay"}).Task.ID
		require.Equal(t, state.TaskFailed, wait(t, e, first).State)
		failing.Store(false)
		opened := time.Now()
		probe := submit(t, e, weft.Submission{Workflow: "shop/pay"}).Task.ID
		held := submit(t, e, weft.Submission{Workflow: "shop/pay"}).Task.ID
		eventually(t, "the cooldown over", func() bool { return time.Since(opened) > 2*cooldown })
		// Work of another workflow wakes the claim loop, which takes a
		// probe with it; the probe's success must bring the other step.
		require.Equal(t, state.TaskCompleted, wait(t, e, submit(t, e, weft.Submission{Workflow: "shop/other"}).Task.ID).State)
		require.Equal(t, state.TaskCompleted, wait(t, e, probe).State)
		require.Equal(t, state.TaskCompleted, wait(t, e, held).State)
	})
}

// TestBreakerOpensAtItsThreshold: a breaker set to open after N failures
// lets exactly N calls fail, on an engine with more slots than N: once its
// first failure is counted (before the failed call's slot claims again),
// claims of the step are held to the room left under the threshold.
func TestBreakerOpensAtItsThreshold(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 2, 3} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			t.Parallel()
			eachBackend(t, func(t *testing.T, open storeFactory) {
				e := newEngine(t, open(t), weft.Config{Concurrency: 4})
				var calls atomic.Int32
				e.Handle("pay", func(ctx context.Context, a *weft.Attempt) (any, error) {
					calls.Add(1)
					return nil, weft.Permanent(errors.New("provider down"))
				})
				register(t, e, workflow.New("shop", "pay", "1").
					Step("call", "pay", workflow.WithCircuitBreaker(n, time.Hour)))
				start(t, e)
				// One call fails first; then more work than slots arrives.
				require.Equal(t, state.TaskFailed, wait(t, e, submit(t, e, weft.Submission{Workflow: "shop/pay"}).Task.ID).State)
				for range 8 {
					submit(t, e, weft.Submission{Workflow: "shop/pay"})
				}
				eventually(t, "the breaker open with no call running", func() bool {
					bs, err := e.Breakers(t.Context())
					require.NoError(t, err)
					running, err := e.List(t.Context(), store.TaskFilter{State: state.TaskRunning, Limit: 10})
					require.NoError(t, err)
					return len(bs) == 1 && bs[0].State == weft.BreakerOpen && len(running) == 0
				})
				require.Equal(t, int32(n), calls.Load(), "calls before the breaker opened")
				bs, err := e.Breakers(t.Context())
				require.NoError(t, err)
				require.Equal(t, n, bs[0].Failures)
			})
		})
	}
}

// TestBreakerCountsBeforeTheSlotClaims: the slot of a failed call under a
// breaker claims again only once its failure is counted, so two slots and
// a threshold of 2 let exactly two calls through, however the completer
// batches outcomes.
func TestBreakerCountsBeforeTheSlotClaims(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		e := newEngine(t, open(t), weft.Config{Concurrency: 2})
		var calls atomic.Int32
		second := make(chan struct{})
		e.Handle("pay", func(ctx context.Context, a *weft.Attempt) (any, error) {
			if calls.Add(1) == 2 {
				<-second // still running when the first failure counts
			}
			return nil, weft.Permanent(errors.New("provider down"))
		})
		register(t, e, workflow.New("shop", "pay", "1").
			Step("call", "pay", workflow.WithCircuitBreaker(2, time.Hour)))
		for range 5 {
			submit(t, e, weft.Submission{Workflow: "shop/pay"})
		}
		start(t, e)
		breaker := func() weft.Breaker {
			bs, err := e.Breakers(t.Context())
			require.NoError(t, err)
			if len(bs) == 0 {
				return weft.Breaker{}
			}
			return bs[0]
		}
		eventually(t, "the first failure counted", func() bool { return breaker().Failures == 1 })
		close(second)
		eventually(t, "the breaker open with no call running", func() bool {
			running, err := e.List(t.Context(), store.TaskFilter{State: state.TaskRunning, Limit: 10})
			require.NoError(t, err)
			return breaker().State == weft.BreakerOpen && len(running) == 0
		})
		require.Equal(t, int32(2), calls.Load())
	})
}
