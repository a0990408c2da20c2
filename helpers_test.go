package weft_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/internal/pgtesting"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/store/postgres"
	"github.com/weftrun/weft/store/sqlite"
)

// storeFactory opens a fresh, empty store for one test. Every behaviour test
// of the engine runs once per backend listed in backends.
type storeFactory func(t testing.TB) store.Store

func backends() map[string]storeFactory {
	return map[string]storeFactory{
		"sqlite": func(t testing.TB) store.Store {
			s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "weft.db"), sqlite.Options{})
			require.NoError(t, err)
			t.Cleanup(func() { s.Close() })
			return s
		},
		"postgres": func(t testing.TB) store.Store {
			return pgtesting.Open(t, postgres.Options{MaxConns: 8})
		},
	}
}

// eachBackend runs fn as a parallel subtest on every backend.
func eachBackend(t *testing.T, fn func(t *testing.T, open storeFactory)) {
	t.Helper()
	for name, open := range backends() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fn(t, open)
		})
	}
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// testConfig is fast: short leases and polls so tests finish quickly.
func testConfig(c weft.Config) weft.Config {
	if c.Logger == nil {
		c.Logger = quietLogger()
	}
	if c.PollInterval == 0 {
		c.PollInterval = 50 * time.Millisecond
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = 100 * time.Millisecond
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = time.Second
	}
	return c
}

// newEngine returns an engine on s, not started.
func newEngine(t *testing.T, s store.Store, c weft.Config) *weft.Engine {
	t.Helper()
	e, err := weft.New(s, testConfig(c))
	require.NoError(t, err)
	return e
}

// start starts e and stops it when the test ends.
func start(t *testing.T, e *weft.Engine) {
	t.Helper()
	require.NoError(t, e.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		require.NoError(t, e.Stop(ctx))
	})
}

// hold blocks a handler until release is closed or its context ends (the
// engine stops, the step is cancelled): a test that fails before it
// releases its handlers still stops its engine.
func hold(ctx context.Context, release <-chan struct{}) error {
	select {
	case <-release:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// wait waits for the task to end, failing the test after a deadline.
func wait(t *testing.T, e *weft.Engine, id int64) *weft.Task {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	task, err := e.Wait(ctx, id)
	require.NoError(t, err, "task %d did not end in time", id)
	return task
}

// eventually polls cond until it holds or a deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func stepByName(t *testing.T, task *weft.Task, name string) weft.TaskStep {
	t.Helper()
	for _, s := range task.Steps {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("task %d has no step %q", task.ID, name)
	return weft.TaskStep{}
}

func submit(t *testing.T, e *weft.Engine, s weft.Submission) weft.SubmitResult {
	t.Helper()
	res, err := e.Submit(context.Background(), s)
	require.NoError(t, err)
	return res
}

// completedBy lists, in order, the engines that recorded a step's
// completion in a task's audit trail: one entry a completion.
func completedBy(audit []weft.AuditEntry) []string {
	var out []string
	for _, a := range audit {
		if a.Step != "" && a.To == string(state.StepCompleted) {
			out = append(out, a.EngineID)
		}
	}
	return out
}

// waitExplained waits for task id to end, as wait does, but with no
// deadline of its own: it gives up shortly before the test's (go test
// -timeout) and then fails with what the store says of the task's steps
// and of the engines, so that a stall is explainable from the test's
// output and not only from the goroutines' stacks.
func waitExplained(t *testing.T, e *weft.Engine, s store.Store, id int64) *weft.Task {
	t.Helper()
	ctx := t.Context()
	if d, ok := t.Deadline(); ok {
		margin := min(30*time.Second, time.Until(d)/4)
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d.Add(-margin))
		defer cancel()
	}
	task, err := e.Wait(ctx, id)
	if err != nil && ctx.Err() != nil {
		t.Fatalf("task %d did not end before the test's deadline: %s", id, explainTask(context.Background(), s, id))
	}
	require.NoError(t, err)
	return task
}

// explainTask describes a task that does not end: its steps counted by
// state, the first of those not finished with their attempt, holder and
// error, and the live engines with the age of their heartbeats.
func explainTask(ctx context.Context, s store.Store, id int64) string {
	task, err := s.GetTask(ctx, id)
	if err != nil {
		return fmt.Sprintf("get task %d: %v", id, err)
	}
	engines, err := s.ListEngines(ctx)
	if err != nil {
		return fmt.Sprintf("list engines: %v", err)
	}
	live := map[string]bool{}
	var b strings.Builder
	b.WriteString("live engines:")
	for _, en := range engines {
		live[en.ID] = true
		fmt.Fprintf(&b, " %s (heartbeat %s ago, leader %t)", en.ID, time.Since(en.HeartbeatAt).Round(time.Millisecond), en.Leader)
	}
	counts := map[state.Step]int{}
	var open []string
	for _, st := range task.Steps {
		counts[st.State]++
		if !st.State.Terminal() && len(open) < 20 {
			holder := ""
			if st.State == state.StepRunning {
				holder = fmt.Sprintf(" under %s (live %t)", st.EngineID, live[st.EngineID])
			}
			open = append(open, fmt.Sprintf("%s (id %d) %s attempt %d%s %q", st.Name, st.ID, st.State, st.Attempts, holder, st.Error))
		}
	}
	fmt.Fprintf(&b, "; task %d %s, steps by state %v; not finished (first 20): %s", task.ID, task.State, counts, strings.Join(open, "; "))
	return b.String()
}
