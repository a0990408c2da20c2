package weft_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/internal/engine"
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

// endingCounter is a statesCounter that passes on its store's signal of
// the tasks its transactions end (store.TaskEnder).
type endingCounter struct {
	*statesCounter
}

func (s endingCounter) TaskEnded() <-chan struct{} {
	return s.statesCounter.Store.(store.TaskEnder).TaskEnded()
}

// TestWaitReadsWhenTasksEnd: on a store that tells when its transactions
// end a task, a waiter's engine reads the task's state when one ended (and
// at its poll), not after every batch of outcomes: ten steps of a chain,
// each recorded in a batch of its own, cost fewer reads than that; the
// last one, which ends the task, answers the waiter. So does a task that
// the engine cancels.
func TestWaitReadsWhenTasksEnd(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		ctx := context.Background()
		counter := &statesCounter{Store: open(t)}
		s := endingCounter{counter}
		e := newEngine(t, s, weft.Config{})
		const n = 10
		ran := make(chan string, n)
		release := make(chan struct{})
		e.Handle("gate", func(ctx context.Context, a *weft.Attempt) (any, error) {
			ran <- a.Step
			select {
			case <-release:
				return nil, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		})
		w := workflow.New("w", "chain", "1")
		for i := range n {
			if i == 0 {
				w.Step("s0", "gate")
				continue
			}
			w.Step("s"+strconv.Itoa(i), "gate", workflow.DependsOn("s"+strconv.Itoa(i-1)))
		}
		require.NoError(t, e.Register(ctx, w))
		id := submit(t, e, weft.Submission{Workflow: "w/chain"}).Task.ID
		start(t, e)
		got := make(chan *weft.Task, 1)
		go func() {
			task, err := e.Wait(ctx, id)
			if err != nil {
				t.Error(err)
			}
			got <- task
		}()
		require.Equal(t, "s0", <-ran)
		eventually(t, "the waiter's first read", func() bool { return counter.reads.Load() > 0 })
		before, began := counter.reads.Load(), time.Now()
		for i := 1; i < n; i++ {
			release <- struct{}{}
			// The next step runs once the batch of the one before is
			// recorded.
			require.Equal(t, "s"+strconv.Itoa(i), <-ran)
		}
		release <- struct{}{}
		task := <-got
		require.Equal(t, state.TaskCompleted, task.State)
		// The waiter also reads every engine.WaitPoll (a task may end on
		// another engine): at most one read a period of the time taken,
		// plus one, are those; the rest answer ends. One read a batch
		// would leave n-1 or more.
		polls := int64(time.Since(began)/engine.WaitPoll) + 1
		reads := counter.reads.Load() - before - polls
		require.LessOrEqual(t, reads, int64(n/2), "reads of the task's state over %d batches of outcomes, besides %d polls", n, polls)

		parked := submit(t, e, weft.Submission{Workflow: "w/chain", RunAt: time.Now().Add(time.Hour)}).Task.ID
		go func() {
			task, err := e.Wait(ctx, parked)
			if err != nil {
				t.Error(err)
			}
			got <- task
		}()
		eventually(t, "the waiter's read", func() bool { return counter.reads.Load() > before+reads })
		err := e.Cancel(ctx, parked)
		require.NoError(t, err)
		require.Equal(t, state.TaskCancelled, (<-got).State)
	})
}
