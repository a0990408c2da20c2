package weft_test

import (
	"context"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/workflow"
)

// lostOutcomes is a store that cannot record outcomes, as if the database
// went away between a claim and its outcome: CompleteSteps fails with a
// transient error, which the engine retries. Everything else works.
type lostOutcomes struct {
	store.Store
}

func (lostOutcomes) CompleteSteps(context.Context, []store.Outcome) ([]error, error) {
	return nil, io.ErrUnexpectedEOF
}

// TestStopWhileOutcomesCannotBeRecorded: an engine whose outcomes cannot
// be written, with more of them than its outbox holds, still stops by its
// deadline; the steps it ran stay to be reclaimed, and another engine
// finishes every task.
func TestStopWhileOutcomesCannotBeRecorded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := backends()["sqlite"](t)
	const tasks = 30 // the outbox holds 4 × Concurrency
	e := newEngine(t, lostOutcomes{s}, weft.Config{Concurrency: 2, ShutdownTimeout: 200 * time.Millisecond})
	var runs atomic.Int32
	e.Handle("noop", func(context.Context, *weft.Attempt) (any, error) {
		runs.Add(1)
		return nil, nil
	})
	require.NoError(t, e.Register(ctx, workflow.New("stop", "one", "1").Step("a", "noop")))
	subs := make([]weft.Submission, tasks)
	for i := range subs {
		subs[i].Workflow = "stop/one"
	}
	_, err := e.SubmitMany(ctx, subs)
	require.NoError(t, err)
	require.NoError(t, e.Start(ctx))
	eventually(t, "every handler to run", func() bool { return runs.Load() == tasks })

	stopped := make(chan error, 1)
	go func() { stopped <- e.Stop(ctx) }()
	select {
	case err := <-stopped:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("Stop did not return while the outcomes could not be written")
	}

	// The steps it ran were not recorded: another engine runs them again.
	e2 := newEngine(t, s, weft.Config{})
	e2.Handle("noop", func(context.Context, *weft.Attempt) (any, error) { return nil, nil })
	start(t, e2)
	list, err := e2.List(ctx, weft.TaskFilter{Limit: tasks})
	require.NoError(t, err)
	require.Len(t, list, tasks)
	for _, task := range list {
		require.Equal(t, state.TaskCompleted, wait(t, e2, task.ID).State)
	}
}
