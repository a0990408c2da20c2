package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/client"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/wire"
	"github.com/weftrun/weft/workflow"
)

// This file follows a GRPCWorker through its life as its user sees it, in
// the scenarios the Python worker's tests cover (clients/python/tests):
// timeouts, a server that declares it dead, stopping, reports that fail on
// the way, traces, late checkpoints, and a server that does not come back.

// patience bounds every wait of these tests.
const patience = 30 * time.Second

// lifeWorker is a GRPCWorker that a test runs and may stop itself.
type lifeWorker struct {
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

// launch runs a worker named name against url until the test ends (or
// halt); edit adjusts its configuration.
func launch(t *testing.T, url, token, name string, edit func(*client.WorkerConfig), handlers map[string]client.StepHandler) *lifeWorker {
	t.Helper()
	cfg := client.WorkerConfig{URL: url, Token: token, Name: name, Slots: 2, MinBackoff: 10 * time.Millisecond,
		MaxBackoff: 100 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if edit != nil {
		edit(&cfg)
	}
	if os.Getenv("WEFT_TEST_WORKER_LOG") != "" { // the workers' logs, to see why a test failed
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	w, err := client.NewGRPCWorker(cfg)
	require.NoError(t, err)
	for n, h := range handlers {
		w.Handle(n, h)
	}
	ctx, cancel := context.WithCancel(context.Background())
	lw := &lifeWorker{cancel: cancel, done: make(chan error, 1)}
	go func() { lw.done <- w.Run(ctx) }()
	t.Cleanup(func() { require.NoError(t, lw.halt()) })
	return lw
}

// halt stops the worker and returns what Run returned.
func (lw *lifeWorker) halt() error {
	lw.once.Do(func() {
		lw.cancel()
		select {
		case lw.err = <-lw.done:
		case <-time.After(patience):
			lw.err = errors.New("Run did not return")
		}
	})
	return lw.err
}

// registrations returns the live registrations of the workers named name.
func registrations(t *testing.T, g *grpcServer, name string) []weft.WorkerInfo {
	t.Helper()
	all, err := g.e.ListWorkers(t.Context())
	require.NoError(t, err)
	var out []weft.WorkerInfo
	for _, w := range all {
		if w.Worker && strings.HasPrefix(w.ID, "remote-"+name+"-") {
			out = append(out, w)
		}
	}
	return out
}

// holds polls cond until it holds (true) or patience passed (false).
func holds(cond func() bool) bool {
	deadline := time.Now().Add(patience)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		<-tick.C
	}
	return true
}

// eventually polls cond until it holds, failing the test after patience.
// Only from the test's goroutine: elsewhere, holds and t.Error.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if !holds(cond) {
		t.Fatalf("waited %s for %s", patience, what)
	}
}

// receive takes the next value of ch, failing the test after patience.
func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(patience):
		t.Fatalf("waited %s for %s", patience, what)
		panic("unreachable")
	}
}

// registered waits for the one live registration of the worker named
// name.
func registered(t *testing.T, g *grpcServer, name string) weft.WorkerInfo {
	t.Helper()
	var regs []weft.WorkerInfo
	eventually(t, "worker "+name+" to register", func() bool { regs = registrations(t, g, name); return len(regs) == 1 })
	return regs[0]
}

func (g *grpcServer) define(t *testing.T, wfs ...*workflow.Workflow) {
	t.Helper()
	for _, wf := range wfs {
		require.NoError(t, g.e.Register(t.Context(), wf))
	}
}

func (g *grpcServer) submit(t *testing.T, wf string, input any) int64 {
	t.Helper()
	sub, err := g.e.Submit(t.Context(), weft.Submission{Workflow: wf, Input: input})
	require.NoError(t, err)
	return sub.Task.ID
}

func (g *grpcServer) wait(t *testing.T, id int64) *weft.Task {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), patience)
	defer cancel()
	task, err := g.e.Wait(ctx, id)
	require.NoError(t, err)
	return task
}

// trail returns the audit entries of a task's step s that end an attempt
// (from running).
func (g *grpcServer) trail(t *testing.T, id int64) []weft.AuditEntry {
	t.Helper()
	all, err := g.e.Audit(t.Context(), id)
	require.NoError(t, err)
	var out []weft.AuditEntry
	for _, a := range all {
		if a.Step == "s" && a.From == string(state.StepRunning) {
			out = append(out, a)
		}
	}
	return out
}

// attemptResult is a handler's result: who ran which attempt.
func attemptResult(step wire.ClaimedStep, by string) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"by": %q, "attempt": %d}`, by, step.Attempt))
}

var fastRetry = workflow.WithRetry(workflow.RetryPolicy{MaxAttempts: 3, Backoff: "fixed", Initial: workflow.Duration(time.Millisecond)})

// TestGRPCWorkerStepTimeout: when a step's timeout passes while its
// handler runs, the handler's context ends (DeadlineExceeded, its cause
// saying the step timed out), the attempt is recorded as timed out and
// retried under the step's policy, and the next attempt completes. A
// handler that ignores its context and returns later is timed out by the
// server, and its late result does not replace the next attempt's.
func TestGRPCWorkerStepTimeout(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		late bool // the handler returns a result after its context ended
	}{
		{"the handler stops with its context", false},
		{"the handler returns late", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g := startGRPCServer(t)
			g.define(t, workflow.New("life", "tmo", "1").Step("s", "remote.tmo", workflow.WithTimeout(300*time.Millisecond), fastRetry))
			type ended struct{ err, cause error }
			first := make(chan ended, 1)
			release := make(chan struct{})
			unblock := sync.OnceFunc(func() { close(release) })
			defer unblock() // also when the test fails, so that the worker can stop
			lw := launch(t, g.hs.URL, g.admin, "tmo", nil, map[string]client.StepHandler{"remote.tmo": func(ctx context.Context, step wire.ClaimedStep) (json.RawMessage, error) {
				if step.Attempt > 1 {
					return attemptResult(step, "tmo"), nil
				}
				<-ctx.Done()
				first <- ended{ctx.Err(), context.Cause(ctx)}
				if tt.late {
					<-release
					return json.RawMessage(`{"late": true}`), nil
				}
				return nil, ctx.Err()
			}})
			id := g.submit(t, "life/tmo", nil)
			e := receive(t, first, "the first attempt's context to end")
			require.ErrorIs(t, e.err, context.DeadlineExceeded)
			require.ErrorContains(t, e.cause, "step timed out after 300ms")

			task := g.wait(t, id)
			require.Equal(t, state.TaskCompleted, task.State)
			require.Equal(t, 2, task.Steps[0].Attempts)
			require.JSONEq(t, `{"by": "tmo", "attempt": 2}`, string(task.Steps[0].Result))
			trail := g.trail(t, id)
			require.NotEmpty(t, trail)
			require.Equal(t, 1, trail[0].Attempt)
			require.Contains(t, trail[0].Reason, "step timed out after 300ms", "%+v", trail)
			// The worker reports a timeout its handler honoured itself; the
			// server times out one whose handler did not return.
			require.Equal(t, !tt.late, strings.HasPrefix(trail[0].EngineID, "remote-tmo-"), "%+v", trail[0])

			unblock()
			require.NoError(t, lw.halt()) // the late handler's report is settled
			task = g.wait(t, id)
			require.Equal(t, 2, task.Steps[0].Attempts)
			require.JSONEq(t, `{"by": "tmo", "attempt": 2}`, string(task.Steps[0].Result), "the late result was refused")
		})
	}
}

// TestGRPCWorkerDeclaredDead: when the server declares the worker dead
// (here it is stopped, as the Python test deregisters it), the handler of
// the step it held is stopped, the worker registers again, once, and goes
// on serving: the step's next attempt and a new task run under its new
// registration.
func TestGRPCWorkerDeclaredDead(t *testing.T) {
	t.Parallel()
	g := startGRPCServer(t)
	g.define(t, workflow.New("life", "rejoin", "1").Step("s", "remote.rejoin", fastRetry))
	held := make(chan context.Context, 1)
	launch(t, g.hs.URL, g.admin, "rejoin", nil, map[string]client.StepHandler{"remote.rejoin": func(ctx context.Context, step wire.ClaimedStep) (json.RawMessage, error) {
		if string(step.Input) == `"hold"` && step.Attempt == 1 {
			held <- ctx
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return attemptResult(step, "rejoin"), nil
	}})
	id := g.submit(t, "life/rejoin", "hold")
	running := receive(t, held, "the step to start")
	old := registered(t, g, "rejoin")
	require.NoError(t, g.e.Workers().Stop(t.Context(), old.ID, old.Owner))

	receive(t, running.Done(), "the worker to stop the step its dead registration held")
	task := g.wait(t, id)
	require.Equal(t, state.TaskCompleted, task.State)
	require.Equal(t, 2, task.Steps[0].Attempts)
	require.JSONEq(t, `{"by": "rejoin", "attempt": 2}`, string(task.Steps[0].Result))
	now := registered(t, g, "rejoin")
	require.NotEqual(t, old.ID, now.ID)
	require.Equal(t, now.ID, task.Steps[0].EngineID, "the next attempt ran under the new registration")

	task = g.run(t, "life/rejoin", nil)
	require.Equal(t, state.TaskCompleted, task.State)
	require.Equal(t, now.ID, task.Steps[0].EngineID)
	require.Len(t, registrations(t, g, "rejoin"), 1, "the worker registered again once")
}

// TestGRPCWorkerStop: stopping a worker (ending Run's context) while a
// handler runs lets the handler finish and report, takes no new step, and
// deregisters; a handler still running when the drain ends is stopped and
// its step handed back, to run again elsewhere; a worker stopped while
// idle returns at once.
func TestGRPCWorkerStop(t *testing.T) {
	t.Parallel()
	t.Run("a running handler finishes and reports", func(t *testing.T) {
		t.Parallel()
		g := startGRPCServer(t)
		g.define(t, workflow.New("life", "drain", "1").Step("s", "remote.drain"))
		var streams atomic.Int64 // Pull streams open
		wrap := func(w http.ResponseWriter, r *http.Request, srv http.Handler) {
			if strings.HasSuffix(r.URL.Path, "/Pull") {
				streams.Add(1)
				defer streams.Add(-1)
			}
			srv.ServeHTTP(w, r)
		}
		g.wrap.Store(&wrap)
		started := make(chan context.Context, 2)
		release := make(chan struct{})
		unblock := sync.OnceFunc(func() { close(release) })
		defer unblock()
		lw := launch(t, g.hs.URL, g.admin, "drain", nil,
			map[string]client.StepHandler{"remote.drain": func(ctx context.Context, step wire.ClaimedStep) (json.RawMessage, error) {
				started <- ctx
				select {
				case <-release:
					return attemptResult(step, "drain"), nil
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}})
		first := g.submit(t, "life/drain", nil)
		running := receive(t, started, "the handler to start")
		reg := registered(t, g, "drain")

		lw.cancel()
		eventually(t, "the stopping worker to close its stream", func() bool { return streams.Load() == 0 })
		require.NoError(t, running.Err(), "stopping leaves the running handler its context")
		second := g.submit(t, "life/drain", nil) // a free slot, but the worker is stopping
		unblock()
		require.NoError(t, lw.halt())

		task := g.wait(t, first)
		require.Equal(t, state.TaskCompleted, task.State, "the handler's result was reported before Run returned")
		require.Equal(t, 1, task.Steps[0].Attempts)
		require.Equal(t, reg.ID, task.Steps[0].EngineID)
		task, err := g.e.Get(t.Context(), second)
		require.NoError(t, err)
		require.Zero(t, task.Steps[0].Attempts, "the stopping worker took no new step")
		require.Empty(t, registrations(t, g, "drain"), "the worker deregistered")
		require.Empty(t, started)
	})

	t.Run("a handler past the drain is stopped and its step handed back", func(t *testing.T) {
		t.Parallel()
		g := startGRPCServer(t)
		g.define(t, workflow.New("life", "abandon", "1").Step("s", "remote.abandon", fastRetry))
		started := make(chan context.Context, 1)
		lw := launch(t, g.hs.URL, g.admin, "abandon", func(c *client.WorkerConfig) { c.Drain = 50 * time.Millisecond },
			map[string]client.StepHandler{"remote.abandon": func(ctx context.Context, step wire.ClaimedStep) (json.RawMessage, error) {
				started <- ctx
				<-ctx.Done()
				return nil, ctx.Err()
			}})
		id := g.submit(t, "life/abandon", nil)
		running := receive(t, started, "the handler to start")
		require.NoError(t, lw.halt())
		require.Error(t, running.Err(), "the drain ended: the handler's context too")
		require.Empty(t, registrations(t, g, "abandon"), "the worker deregistered")
		task, err := g.e.Get(t.Context(), id)
		require.NoError(t, err)
		require.NotEqual(t, state.TaskFailed, task.State)
		require.Equal(t, state.StepReady, task.Steps[0].State, "handed back")

		launch(t, g.hs.URL, g.admin, "heir", nil, map[string]client.StepHandler{"remote.abandon": func(_ context.Context, step wire.ClaimedStep) (json.RawMessage, error) {
			return attemptResult(step, "heir"), nil
		}})
		task = g.wait(t, id)
		require.Equal(t, state.TaskCompleted, task.State)
		require.JSONEq(t, `{"by": "heir", "attempt": 2}`, string(task.Steps[0].Result))
		for _, a := range g.trail(t, id) {
			require.NotContains(t, a.Reason, "context canceled", "the abandoned attempt reported no failure of its own: %+v", a)
		}
	})

	t.Run("an idle worker stops at once", func(t *testing.T) {
		t.Parallel()
		g := startGRPCServer(t)
		lw := launch(t, g.hs.URL, g.admin, "idle", nil, map[string]client.StepHandler{"remote.never": func(context.Context, wire.ClaimedStep) (json.RawMessage, error) {
			return nil, nil
		}})
		registered(t, g, "idle")
		eventually(t, "the worker's stream to open", func() bool { return g.pulls.Load() > 0 })
		start := time.Now()
		require.NoError(t, lw.halt())
		require.Less(t, time.Since(start), 3*time.Second, "Run waited for its stream after its context ended")
		require.Empty(t, registrations(t, g, "idle"), "the worker deregistered")
	})
}

// TestGRPCWorkerReportRetried: a report that fails on the way is sent
// again, and the step is recorded once: refused before it reached the
// server, it lands on a later try (the worker heartbeats the step
// meanwhile, so the server does not release it); lost after the server
// recorded it, the next try is refused and ends the retries.
func TestGRPCWorkerReportRetried(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		recorded bool // the server recorded the refused report
		sent     int64
	}{
		{"refused before the server", false, 3},
		{"answer lost after the server recorded it", true, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g := startGRPCServer(t)
			g.define(t, workflow.New("life", "report", "1").Step("s", "remote.report"))
			var completes, beats atomic.Int64
			// Broken: the first Complete; with recorded, its answer alone.
			// Unless recorded, the second too, and it is answered only
			// after two heartbeats while the worker tries again.
			wrap := func(w http.ResponseWriter, r *http.Request, srv http.Handler) {
				switch {
				case strings.HasSuffix(r.URL.Path, "/Heartbeat"):
					beats.Add(1)
				case strings.HasSuffix(r.URL.Path, "/Complete"):
					n := completes.Add(1)
					if n == 1 && tt.recorded {
						srv.ServeHTTP(httptest.NewRecorder(), r)
					}
					if n == 1 || (n == 2 && !tt.recorded) {
						if n == 2 {
							from := beats.Load()
							if !holds(func() bool { return beats.Load() >= from+2 }) {
								t.Error("no heartbeat while the report was retried")
							}
						}
						http.Error(w, "test: the server is away", http.StatusServiceUnavailable)
						return
					}
				}
				srv.ServeHTTP(w, r)
			}
			g.wrap.Store(&wrap)
			lw := launch(t, g.hs.URL, g.admin, "report", nil, map[string]client.StepHandler{"remote.report": func(ctx context.Context, step wire.ClaimedStep) (json.RawMessage, error) {
				// Run past a heartbeat interval, so that a heartbeat not
				// listing the step would release it.
				from := beats.Load()
				if !holds(func() bool { return beats.Load() >= from+2 }) {
					t.Error("no heartbeat while the handler ran")
				}
				return attemptResult(step, "report"), nil
			}})
			id := g.submit(t, "life/report", nil)
			task := g.wait(t, id)
			require.Equal(t, state.TaskCompleted, task.State)
			require.Equal(t, 1, task.Steps[0].Attempts)
			require.JSONEq(t, `{"by": "report", "attempt": 1}`, string(task.Steps[0].Result))
			eventually(t, "the worker to send the report again", func() bool { return completes.Load() >= tt.sent })
			require.NoError(t, lw.halt()) // its reports settled
			require.Equal(t, tt.sent, completes.Load())
			trail := g.trail(t, id)
			require.Len(t, trail, 1, "recorded once: %+v", trail)
			require.Equal(t, string(state.StepCompleted), trail[0].To)
		})
	}
}

// TestGRPCWorkerTrace: the submitter's trace reaches the step's handler,
// as wire.ClaimedStep.TraceParent and TraceState (what the Python worker's
// step carries) and as the remote span of the handler's context, so that
// the handler's spans join the task's trace. A task submitted outside any
// trace starts its own.
func TestGRPCWorkerTrace(t *testing.T) {
	t.Parallel()
	g := startGRPCServer(t)
	g.define(t, workflow.New("life", "traced", "1").Step("s", "remote.traced"))
	type seen struct {
		parent, state string
		span          trace.SpanContext
	}
	got := make(chan seen, 1)
	launch(t, g.hs.URL, g.admin, "traced", nil, map[string]client.StepHandler{"remote.traced": func(ctx context.Context, step wire.ClaimedStep) (json.RawMessage, error) {
		got <- seen{step.TraceParent, step.TraceState, trace.SpanContextFromContext(ctx)}
		return nil, nil
	}})
	c, err := client.NewGRPC(g.hs.URL, g.tasks)
	require.NoError(t, err)
	const caller = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	tests := []struct {
		name          string
		parent, state string // the submitter's
	}{
		{"the submitter's trace", caller, "vendor=abc"},
		{"outside any trace", "", ""},
	}
	for _, tt := range tests {
		ctx := t.Context()
		if tt.parent != "" {
			ctx = propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": tt.parent, "tracestate": tt.state})
		}
		res, err := c.Submit(ctx, wire.SubmitRequest{Workflow: "life/traced"})
		require.NoError(t, err, tt.name)
		s := receive(t, got, "the handler of "+tt.name)
		require.Equal(t, state.TaskCompleted, g.wait(t, res.Task.ID).State, tt.name)
		require.Regexp(t, regexp.MustCompile(`^00-[0-9a-f]{32}-[0-9a-f]{16}-01$`), s.parent, tt.name)
		if tt.parent != "" {
			require.Equal(t, tt.parent, s.parent, tt.name)
			require.Equal(t, tt.state, s.state, tt.name)
		} else {
			require.NotContains(t, s.parent, "4bf92f3577b34da6a3ce929d0e0e4736", tt.name)
			require.Empty(t, s.state, tt.name)
		}
		require.True(t, s.span.IsValid() && s.span.IsRemote(), "%s: the handler's context carries the step's trace", tt.name)
		require.Equal(t, s.parent[3:35], s.span.TraceID().String(), tt.name)
		require.Equal(t, s.parent[36:52], s.span.SpanID().String(), tt.name)
		require.Equal(t, tt.state, s.span.TraceState().String(), tt.name)
	}
}

// TestGRPCWorkerCheckpointAfterTimeout: once the step's timeout passed, a
// checkpoint (or progress) from its handler is refused by the worker
// itself, without a request, with an error that says why: a conflict
// (stale_lease), as the server's refusal of a step no longer held is. The
// step fails as timed out and keeps no checkpoint.
func TestGRPCWorkerCheckpointAfterTimeout(t *testing.T) {
	t.Parallel()
	g := startGRPCServer(t)
	g.define(t, workflow.New("life", "late", "1").Step("s", "remote.late", workflow.WithTimeout(300*time.Millisecond),
		workflow.WithRetry(workflow.RetryPolicy{MaxAttempts: 1})))
	var sent atomic.Int64
	wrap := func(w http.ResponseWriter, r *http.Request, srv http.Handler) {
		if strings.HasSuffix(r.URL.Path, "/Checkpoint") || strings.HasSuffix(r.URL.Path, "/Progress") {
			sent.Add(1)
		}
		srv.ServeHTTP(w, r)
	}
	g.wrap.Store(&wrap)
	type refusal struct {
		what string
		err  error
	}
	refused := make(chan refusal, 2)
	launch(t, g.hs.URL, g.admin, "late", nil, map[string]client.StepHandler{"remote.late": func(ctx context.Context, _ wire.ClaimedStep) (json.RawMessage, error) {
		<-ctx.Done()
		cerr := client.Checkpoint(ctx, map[string]string{"too": "late"})
		refused <- refusal{"checkpoint", cerr}
		refused <- refusal{"progress", client.Progress(ctx, 0.9, "late")}
		return nil, cerr
	}})
	task := g.run(t, "life/late", nil)
	require.Equal(t, state.TaskFailed, task.State)
	require.Contains(t, task.Steps[0].Error, "step timed out after 300ms")
	require.True(t, len(task.Steps[0].Checkpoint) == 0 || string(task.Steps[0].Checkpoint) == "null", "%s", task.Steps[0].Checkpoint)
	for range 2 {
		r := receive(t, refused, "the late calls to return")
		require.ErrorIs(t, r.err, weft.ErrConflict, r.what)
		require.True(t, client.IsCode(r.err, wire.CodeStaleLease), "%s: %v", r.what, r.err)
		require.ErrorContains(t, r.err, r.what+" of step")
		require.ErrorContains(t, r.err, "step timed out after 300ms", r.what)
	}
	require.Zero(t, sent.Load(), "refused by the worker: no request was sent")
}

// TestGRPCWorkerServerGone: the server a worker holds a step from goes
// away mid-stream and does not come back within the lease: the step's
// lease lapses, it is reclaimed and its next attempt runs on a worker of
// another server of the same database (the complement of
// TestServeKilledUnderGRPCWorker, where the server comes back in time).
// In-process, the other server is a second listener of the same engine.
func TestGRPCWorkerServerGone(t *testing.T) {
	t.Parallel()
	g := startGRPCServerLease(t, 2*time.Second) // a lease that lapses soon
	g.define(t, workflow.New("life", "gone", "1").Step("s", "remote.gone", fastRetry))
	other := httptest.NewUnstartedServer(g.hs.Config.Handler)
	other.Config.Protocols = new(http.Protocols)
	other.Config.Protocols.SetUnencryptedHTTP2(true)
	other.Start()
	t.Cleanup(other.Close)

	held := make(chan struct{}, 1)
	release := make(chan struct{})
	launch(t, g.hs.URL, g.admin, "first", func(c *client.WorkerConfig) { c.Slots = 1 },
		map[string]client.StepHandler{"remote.gone": func(ctx context.Context, step wire.ClaimedStep) (json.RawMessage, error) {
			held <- struct{}{}
			select {
			case <-release:
				return attemptResult(step, "first"), nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}})
	id := g.submit(t, "life/gone", nil)
	receive(t, held, "the first worker to hold the step")
	// The first worker's server dies: no new connection, the open ones cut.
	require.NoError(t, g.hs.Listener.Close())
	g.hs.CloseClientConnections()
	defer close(release) // the first worker's handler returns; its report goes nowhere

	launch(t, other.URL, g.admin, "second", nil, map[string]client.StepHandler{"remote.gone": func(_ context.Context, step wire.ClaimedStep) (json.RawMessage, error) {
		return attemptResult(step, "second"), nil
	}})
	task := g.wait(t, id)
	require.Equal(t, state.TaskCompleted, task.State)
	require.Equal(t, 2, task.Steps[0].Attempts)
	require.JSONEq(t, `{"by": "second", "attempt": 2}`, string(task.Steps[0].Result))
	require.True(t, strings.HasPrefix(task.Steps[0].EngineID, "remote-second-"), task.Steps[0].EngineID)
	trail := g.trail(t, id)
	require.NotEmpty(t, trail)
	require.Equal(t, 1, trail[0].Attempt)
	require.Contains(t, trail[0].Reason, "lease lapsed", "%+v", trail[0])
}
