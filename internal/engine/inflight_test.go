package engine

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/store/sqlite"
	"github.com/weftrun/weft/workflow"
)

// TestEarlierAttemptLeavesTheLaterInFlight: an attempt taken back (its
// lease lost) that returns after a later attempt of the same step was
// claimed on this engine leaves the later one in flight, where heartbeats
// list it and cancellation reaches it.
func TestEarlierAttemptLeavesTheLaterInFlight(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "weft.db"), sqlite.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	e, err := New(s, Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	_, _, err = e.Definitions().Register(ctx, workflow.New("t", "w", "1").Step("s", "h", workflow.Preemptible()))
	require.NoError(t, err)
	release := map[int]chan struct{}{1: make(chan struct{}), 2: make(chan struct{})}
	e.Handle("h", func(ctx context.Context, r *Run) (any, error) {
		select {
		case <-release[r.Number]:
		case <-time.After(time.Minute):
		}
		return nil, nil
	})
	attempt := func(n int) []store.ClaimedStep {
		var c store.ClaimedStep
		c.ID, c.TaskID, c.Name, c.Handler, c.Namespace, c.Attempts, c.Preemptible = 7, 1, "s", "h", "t", n, true
		c.Workflow, c.Version, c.Input = "w", "1", json.RawMessage(`{}`)
		c.Fence = store.Fence{StepID: 7, Attempt: n, LeaseID: int64(n)}
		return []store.ClaimedStep{c}
	}
	first := e.exec.launch(attempt(1))
	second := e.exec.launch(attempt(2))
	close(release[1])
	<-first.done // the first attempt's goroutine finished its bookkeeping
	running := e.exec.running()
	require.Len(t, running, 1)
	require.Equal(t, 2, running[0].Fence.Attempt, "the later attempt stays in flight")
	e.exec.mu.Lock()
	require.Equal(t, 1, e.exec.preemptible)
	e.exec.mu.Unlock()
	close(release[2])
	<-second.done
	require.Empty(t, e.exec.running())
	e.exec.mu.Lock()
	require.Zero(t, e.exec.preemptible)
	e.exec.mu.Unlock()
}
