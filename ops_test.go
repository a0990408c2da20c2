package weft_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/internal/pgtesting"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/store/postgres"
	"github.com/weftrun/weft/workflow"
)

// TestRetentionByMaintenance: the maintenance leader deletes finished tasks
// past their workflow's retention, and a namespace's retention applies to
// its other workflows; it publishes what it deleted.
func TestRetentionByMaintenance(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		e := newEngine(t, open(t), weft.Config{UpkeepInterval: 20 * time.Millisecond})
		ctx := context.Background()
		e.Handle("ok", func(ctx context.Context, a *weft.Attempt) (any, error) { return "done", nil })
		e.Handle("boom", func(ctx context.Context, a *weft.Attempt) (any, error) { return nil, weft.Permanent(context.Canceled) })
		short := workflow.New("shop", "short", "1").Step("s", "ok")
		short.Retention = &workflow.Retention{Completed: workflow.Duration(time.Second)}
		require.NoError(t, e.Register(ctx, short))
		require.NoError(t, e.Register(ctx, workflow.New("shop", "plain", "1").Step("s", "boom")))
		require.NoError(t, e.Register(ctx, workflow.New("other", "plain", "1").Step("s", "boom")))
		var mu sync.Mutex
		pruned := map[string]int{}
		defer e.Subscribe(func(ev weft.Event) {
			if ev.Kind == weft.EventPruned {
				mu.Lock()
				pruned[ev.Namespace+"/"+ev.Workflow] += ev.Count
				mu.Unlock()
			}
		})()
		start(t, e)
		a := submit(t, e, weft.Submission{Workflow: "shop/short"}).Task.ID
		b := submit(t, e, weft.Submission{Workflow: "shop/plain"}).Task.ID
		c := submit(t, e, weft.Submission{Workflow: "other/plain"}).Task.ID
		// a may be deleted as soon as it completes: wait for the others.
		for _, id := range []int64{b, c} {
			wait(t, e, id)
		}
		eventually(t, "the short workflow's task to be deleted", func() bool {
			_, err := e.Get(ctx, a)
			return err != nil
		})
		_, err := e.Get(ctx, a)
		require.ErrorIs(t, err, weft.ErrNotFound)
		require.NoError(t, e.SetRetention(ctx, "shop", state.TaskFailed, time.Second, weft.Operator{Actor: "test"}))
		eventually(t, "the namespace retention to delete shop/plain's task", func() bool {
			_, err := e.Get(ctx, b)
			return err != nil
		})
		task, err := e.Get(ctx, c)
		require.NoError(t, err, "another namespace keeps its tasks")
		require.Equal(t, state.TaskFailed, task.State)
		// The pruned events follow the deletions they report.
		eventually(t, "the pruned events", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return pruned["shop/"] > 0
		})
		mu.Lock()
		require.Equal(t, map[string]int{"shop/short": 1, "shop/": 1}, pruned)
		mu.Unlock()
		log, err := e.OperatorLog(ctx, 10)
		require.NoError(t, err)
		require.Len(t, log, 1, "retention records the change, not each deletion")
		require.Equal(t, "retention", log[0].Action)
	})
}

// TestAttentionAndAdvertisedHandlers: a ready step whose handler nobody
// serves needs attention once it waited past StaleAfter; an engine that
// registers the handler later advertises it at its next heartbeat, which
// takes the task off the list; the leader publishes the count.
func TestAttentionAndAdvertisedHandlers(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		e := newEngine(t, open(t), weft.Config{UpkeepInterval: 20 * time.Millisecond, StaleAfter: time.Millisecond})
		ctx := context.Background()
		e.Handle("ok", func(ctx context.Context, a *weft.Attempt) (any, error) { return "done", nil })
		require.NoError(t, e.Register(ctx, workflow.New("shop", "orphan", "1").Step("s", "later")))
		counts := make(chan int, 100)
		defer e.Subscribe(func(ev weft.Event) {
			if ev.Kind == weft.EventAttention {
				select {
				case counts <- ev.Count:
				default:
				}
			}
		})()
		start(t, e)
		id := submit(t, e, weft.Submission{Workflow: "shop/orphan"}).Task.ID
		eventually(t, "the attention list to show the orphan", func() bool {
			tasks, err := e.List(ctx, weft.TaskFilter{Attention: true, StaleAfter: time.Millisecond})
			return err == nil && len(tasks) == 1 && tasks[0].ID == id
		})
		eventually(t, "an attention event counting it", func() bool {
			for {
				select {
				case n := <-counts:
					if n == 1 {
						return true
					}
				default:
					return false
				}
			}
		})
		ws, err := e.ListWorkers(ctx)
		require.NoError(t, err)
		require.Len(t, ws, 1)
		require.NotContains(t, ws[0].Handlers, "later")
		e.Handle("later", func(ctx context.Context, a *weft.Attempt) (any, error) { return "ran", nil })
		require.Equal(t, state.TaskCompleted, wait(t, e, id).State)
		eventually(t, "the new handler to be advertised", func() bool {
			ws, err := e.ListWorkers(ctx)
			require.NoError(t, err)
			for _, h := range ws[0].Handlers {
				if h == "later" {
					return true
				}
			}
			return false
		})
	})
}

// TestBulkInBatches: a bulk action walks its selection in batches and a
// rerun continues where an interrupted one stopped.
func TestBulkInBatches(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		e := newEngine(t, open(t), weft.Config{})
		ctx := context.Background()
		require.NoError(t, e.Register(ctx, workflow.New("shop", "parked", "1").Step("s", "nobody")))
		subs := make([]weft.Submission, 23)
		for i := range subs {
			subs[i] = weft.Submission{Workflow: "shop/parked", Tags: map[string]string{"batch": "b1"}}
		}
		_, err := e.SubmitMany(ctx, subs)
		require.NoError(t, err)
		_, err = e.Submit(ctx, weft.Submission{Workflow: "shop/parked", Tags: map[string]string{"batch": "b2"}})
		require.NoError(t, err)
		f := weft.TaskFilter{Tags: map[string]string{"batch": "b1"}}
		res, err := e.CancelTasks(ctx, weft.BulkRequest{Filter: f, BatchSize: 10, Actor: "test"})
		require.NoError(t, err)
		require.Equal(t, weft.BulkResult{Matched: 23, Done: 23, Complete: true}, res)
		again, err := e.CancelTasks(ctx, weft.BulkRequest{Filter: f, BatchSize: 10})
		require.NoError(t, err)
		require.Equal(t, weft.BulkResult{Complete: true}, again, "a rerun finds nothing left")
		// A delete interrupted in its second batch (its archive ends the
		// context) keeps the first; running it again finishes the job.
		stopped, cancel := context.WithCancel(ctx)
		calls := 0
		first, err := e.DeleteTasks(stopped, weft.BulkRequest{Filter: f, BatchSize: 10, Archive: func(a []weft.ArchivedTask) error {
			if calls++; calls == 2 {
				cancel()
			}
			return nil
		}})
		require.ErrorIs(t, err, context.Canceled)
		require.GreaterOrEqual(t, first.Done, 10, "the first batch was committed")
		second, err := e.DeleteTasks(ctx, weft.BulkRequest{Filter: f, BatchSize: 10})
		require.NoError(t, err)
		require.Equal(t, 23, first.Done+second.Done)
		n, err := e.List(ctx, weft.TaskFilter{Tags: f.Tags})
		require.NoError(t, err)
		require.Empty(t, n)
		left, err := e.List(ctx, weft.TaskFilter{State: state.TaskPending})
		require.NoError(t, err)
		require.Len(t, left, 1)
		require.Equal(t, "b2", left[0].Tags["batch"])
		_, err = e.CancelTasks(ctx, weft.BulkRequest{})
		require.ErrorIs(t, err, weft.ErrInvalid, "an empty filter needs All")
		res, err = e.CancelTasks(ctx, weft.BulkRequest{All: true, DryRun: true})
		require.NoError(t, err)
		require.Equal(t, weft.BulkResult{Matched: 1, DryRun: true, Complete: true}, res)
		_, err = e.Submit(ctx, weft.Submission{Workflow: "shop/parked", Tags: map[string]string{"bad key": "x"}})
		require.ErrorIs(t, err, store.ErrInvalid)
	})
}

// TestHistoryPartitionsByMaintenance: on PostgreSQL the maintenance leader
// creates the audit trail's time partitions, so that a task's rows go to
// the partition of the time they were written, not to audit_default.
func TestHistoryPartitionsByMaintenance(t *testing.T) {
	t.Parallel()
	s := pgtesting.Open(t, postgres.Options{MaxConns: 8})
	e := newEngine(t, s, weft.Config{UpkeepInterval: 20 * time.Millisecond})
	ctx := context.Background()
	e.Handle("ok", func(ctx context.Context, a *weft.Attempt) (any, error) { return "done", nil })
	require.NoError(t, e.Register(ctx, workflow.New("shop", "job", "1").Step("s", "ok")))
	start(t, e)
	eventually(t, "the leader's partitions ahead", func() bool {
		var n int
		require.NoError(t, s.DB().QueryRowContext(ctx, `SELECT count(*) FROM pg_inherits WHERE inhparent = 'audit'::regclass`).Scan(&n))
		// audit_kept, audit_default and the migration's three quarter
		// hours; without retention, the leader adds days up to two ahead.
		return n > 5
	})
	id := submit(t, e, weft.Submission{Workflow: "shop/job"}).Task.ID
	wait(t, e, id)
	rows, err := s.DB().QueryContext(ctx, `SELECT tableoid::regclass::text FROM audit WHERE task_id = $1`, id)
	require.NoError(t, err)
	defer rows.Close()
	n := 0
	for ; rows.Next(); n++ {
		var p string
		require.NoError(t, rows.Scan(&p))
		require.Regexp(t, `^audit_p\d{8}t\d{6}_\d{8}t\d{6}$`, p)
	}
	require.NoError(t, rows.Err())
	require.Positive(t, n)
}
