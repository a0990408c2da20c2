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
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/workflow"
)

// statesCounter counts the reads of task states that waiters make.
type statesCounter struct {
	store.Store
	reads, ids atomic.Int64
}

func (s *statesCounter) TaskStates(ctx context.Context, ids []int64) (map[int64]state.Task, error) {
	s.reads.Add(1)
	s.ids.Add(int64(len(ids)))
	return s.Store.TaskStates(ctx, ids)
}

// TestManyWaitersShareTheirReads: two hundred callers wait at once for
// two hundred tasks; each gets its task completed, and the engine reads
// their states together, so the reads are far fewer than the waiters
// (one each per batch of outcomes when every waiter read its own). A
// task not found and a caller that gives up are answered as before.
func TestManyWaitersShareTheirReads(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		ctx := context.Background()
		counter := &statesCounter{Store: open(t)}
		e := newEngine(t, counter, weft.Config{})
		release := make(chan struct{})
		e.Handle("gate", func(ctx context.Context, a *weft.Attempt) (any, error) {
			select {
			case <-release:
				return "done", nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		})
		require.NoError(t, e.Register(ctx, workflow.New("w", "gated", "1").Step("s", "gate")))
		const n = 200
		subs := make([]weft.Submission, n)
		for i := range subs {
			subs[i] = weft.Submission{Workflow: "w/gated"}
		}
		tasks, err := e.SubmitMany(ctx, subs)
		require.NoError(t, err)
		start(t, e)

		var wg sync.WaitGroup
		got := make([]*weft.Task, n)
		errs := make([]error, n)
		for i := range tasks {
			wg.Add(1)
			go func() {
				defer wg.Done()
				wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
				defer cancel()
				got[i], errs[i] = e.Wait(wctx, tasks[i].Task.ID)
			}()
		}
		eventually(t, "the waiters' first read", func() bool { return counter.reads.Load() > 0 })
		close(release)
		wg.Wait()
		for i := range got {
			require.NoError(t, errs[i])
			require.Equal(t, tasks[i].Task.ID, got[i].ID)
			require.Equal(t, state.TaskCompleted, got[i].State)
		}
		reads := counter.reads.Load()
		require.Less(t, reads, int64(n/2), "reads of the states: %d for %d waiters", reads, n)
		require.Greater(t, counter.ids.Load(), reads, "reads carry several tasks")

		_, err = e.Wait(ctx, 999999)
		require.ErrorIs(t, err, weft.ErrNotFound)
		parked := submit(t, e, weft.Submission{Workflow: "w/gated", RunAt: time.Now().Add(time.Hour)}).Task.ID
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		task, err := e.Wait(cctx, parked)
		require.ErrorIs(t, err, context.Canceled)
		require.Equal(t, parked, task.ID, "the task as it is")
	})
}
