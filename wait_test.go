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

// statesCounter counts the reads of task states that waiters make, and
// the most tasks one read carried.
type statesCounter struct {
	store.Store
	reads, ids, most atomic.Int64
}

func (s *statesCounter) TaskStates(ctx context.Context, ids []int64) (map[int64]state.Task, error) {
	s.reads.Add(1)
	s.ids.Add(int64(len(ids)))
	for n := int64(len(ids)); ; {
		m := s.most.Load()
		if n <= m || s.most.CompareAndSwap(m, n) {
			break
		}
	}
	return s.Store.TaskStates(ctx, ids)
}

// TestManyWaitersShareTheirReads: two hundred callers wait at once for
// two hundred tasks; each gets its task completed, and the engine reads
// their states together, so the reads once all wait are far fewer than
// the waiters (one each per batch of outcomes when every waiter read its
// own). The reads while they arrive, one a new waiter or a few, depend on
// how the goroutines are scheduled and are not counted. A task not found
// and a caller that gives up are answered as before.
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
		eventually(t, "a read of every waiter's task", func() bool { return counter.most.Load() == n })
		before, beforeIDs := counter.reads.Load(), counter.ids.Load()
		close(release)
		wg.Wait()
		for i := range got {
			require.NoError(t, errs[i])
			require.Equal(t, tasks[i].Task.ID, got[i].ID)
			require.Equal(t, state.TaskCompleted, got[i].State)
		}
		reads := counter.reads.Load() - before
		require.Less(t, reads, int64(n/2), "reads of the states: %d for %d waiters", reads, n)
		require.Greater(t, counter.ids.Load()-beforeIDs, reads, "reads carry several tasks")

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
