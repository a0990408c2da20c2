package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/client"
	"github.com/weftrun/weft/server"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/weftdb"
	"github.com/weftrun/weft/wire"
	"github.com/weftrun/weft/wire/weftv1"
	"github.com/weftrun/weft/workflow"
)

// grpcServer is an engine serving its API over HTTP/1.1 and cleartext
// HTTP/2, counting the Pull streams opened.
type grpcServer struct {
	e     *weft.Engine
	hs    *httptest.Server
	pulls atomic.Int64
	admin string // workers:connect
	tasks string // tasks:*
	// wrap, when set, serves each request in the server's place, given
	// the server: a test's way to watch or break the worker's calls.
	wrap atomic.Pointer[func(w http.ResponseWriter, r *http.Request, srv http.Handler)]
}

func startGRPCServer(t *testing.T) *grpcServer {
	t.Helper()
	return startGRPCServerLease(t, time.Minute)
}

// startGRPCServerLease is startGRPCServer with the engine's LeaseTTL. The
// minute of startGRPCServer is one that no stall of a loaded machine
// outlasts: a lapsed lease runs the step again (at least once), which the
// tests that count a step's runs, or read what its handler saw, would take
// for a fault. A test of a lapse asks for a short one.
func startGRPCServerLease(t *testing.T, lease time.Duration) *grpcServer {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	db, err := weftdb.Open(t.Context(), filepath.Join(t.TempDir(), "weft.db"), weftdb.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	e, err := weft.New(db, weft.Config{Logger: quiet, HeartbeatInterval: 100 * time.Millisecond, LeaseTTL: lease})
	require.NoError(t, err)
	for _, wf := range []*workflow.Workflow{workflow.New("shop", "ok", "1").Step("s", "remote.ok"),
		workflow.New("shop", "bad", "1").Step("s", "remote.bad"), workflow.New("shop", "slow", "1").Step("s", "remote.slow"),
		workflow.New("shop", "resume", "1").Step("s", "remote.resume",
			workflow.WithRetry(workflow.RetryPolicy{MaxAttempts: 2, Backoff: "fixed", Initial: workflow.Duration(time.Millisecond)})),
		workflow.New("shop", "hold", "1").Step("s", "remote.hold", workflow.Preemptible()),
		workflow.New("shop", "nul", "1").Step("s", "remote.nul")} {
		require.NoError(t, e.Register(t.Context(), wf))
	}
	require.NoError(t, e.Start(t.Context()))
	t.Cleanup(func() { _ = e.Stop(context.Background()) })
	srv, err := server.New(e, server.Options{Logger: quiet})
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })
	token, k, err := server.NewAPIKey("worker", []string{server.PermWorkersConnect})
	require.NoError(t, err)
	require.NoError(t, db.CreateAPIKey(t.Context(), k))
	tasksToken, tk, err := server.NewAPIKey("tasks", []string{"tasks:*"})
	require.NoError(t, err)
	require.NoError(t, db.CreateAPIKey(t.Context(), tk))
	g := &grpcServer{e: e, admin: token, tasks: tasksToken}
	g.hs = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/Pull") {
			g.pulls.Add(1)
		}
		if wrap := g.wrap.Load(); wrap != nil {
			(*wrap)(w, r, srv)
			return
		}
		srv.ServeHTTP(w, r)
	}))
	g.hs.Config.Protocols = new(http.Protocols)
	g.hs.Config.Protocols.SetHTTP1(true)
	g.hs.Config.Protocols.SetUnencryptedHTTP2(true)
	g.hs.Start()
	t.Cleanup(g.hs.Close)
	return g
}

// runWorker runs a worker of g until the test ends; its handler
// remote.slow reports on slow that it started and waits for its context.
func runWorker(t *testing.T, g *grpcServer, token string, slow chan<- context.Context) <-chan error {
	t.Helper()
	w, err := client.NewGRPCWorker(client.WorkerConfig{URL: g.hs.URL, Token: token, Slots: 2, MinBackoff: 10 * time.Millisecond,
		MaxBackoff: 100 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	w.Handle("remote.ok", func(_ context.Context, step wire.ClaimedStep) (json.RawMessage, error) {
		return json.RawMessage(`{"seen":` + string(step.Input) + `}`), nil
	})
	w.Handle("remote.bad", func(context.Context, wire.ClaimedStep) (json.RawMessage, error) {
		return nil, client.Permanent(errors.New("no such card"))
	})
	w.Handle("remote.slow", func(ctx context.Context, _ wire.ClaimedStep) (json.RawMessage, error) {
		slow <- ctx
		<-ctx.Done()
		return nil, ctx.Err()
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	return done
}

func (g *grpcServer) run(t *testing.T, workflow string, input any) *weft.Task {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	sub, err := g.e.Submit(ctx, weft.Submission{Workflow: workflow, Input: input})
	require.NoError(t, err)
	task, err := g.e.Wait(ctx, sub.Task.ID)
	require.NoError(t, err)
	return task
}

// TestGRPCWorker: the worker's outcomes are the steps', and after its
// connection drops it connects again and is pushed the next step.
func TestGRPCWorker(t *testing.T) {
	t.Parallel()
	g := startGRPCServer(t)
	slow := make(chan context.Context, 1)
	runWorker(t, g, g.admin, slow)
	tests := []struct {
		workflow string
		state    state.Task
		result   string
		err      string
	}{
		{"shop/ok", state.TaskCompleted, `{"seen":{"n":1}}`, ""},
		{"shop/bad", state.TaskFailed, "", "no such card"},
	}
	for _, tt := range tests {
		task := g.run(t, tt.workflow, map[string]int{"n": 1})
		require.Equal(t, tt.state, task.State, tt.workflow)
		if tt.result != "" {
			require.JSONEq(t, tt.result, string(task.Steps[0].Result))
		}
		require.Contains(t, task.Steps[0].Error, tt.err)
		if tt.err != "" {
			require.Equal(t, 1, task.Steps[0].Attempts, "a permanent failure is not retried")
		}
	}
	before := g.pulls.Load()
	g.hs.CloseClientConnections()
	task := g.run(t, "shop/ok", map[string]int{"n": 2})
	require.Equal(t, state.TaskCompleted, task.State)
	require.Greater(t, g.pulls.Load(), before, "the worker opened its stream again")

	// A step the server takes back (its task cancelled) is cancelled in
	// the worker at its next heartbeat.
	sub, err := g.e.Submit(t.Context(), weft.Submission{Workflow: "shop/slow"})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var running context.Context
	select {
	case running = <-slow:
	case <-ctx.Done():
		t.Fatal("the slow step never started")
	}
	require.NoError(t, g.e.Cancel(ctx, sub.Task.ID))
	select {
	case <-running.Done():
	case <-ctx.Done():
		t.Fatal("the worker did not cancel the step it lost")
	}
}

// TestGRPCWorkerRefused: a credential the server refuses ends Run with
// the refusal, which retrying will not change.
func TestGRPCWorkerRefused(t *testing.T) {
	t.Parallel()
	g := startGRPCServer(t)
	w, err := client.NewGRPCWorker(client.WorkerConfig{URL: g.hs.URL, Token: "weft_0000000000000000_nope",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	w.Handle("remote.ok", func(context.Context, wire.ClaimedStep) (json.RawMessage, error) { return nil, nil })
	err = w.Run(t.Context())
	require.Error(t, err)
	var ae *client.Error
	require.ErrorAs(t, err, &ae)
	require.Equal(t, http.StatusUnauthorized, ae.Status)
	require.Equal(t, wire.CodeUnauthenticated, ae.Code)
}

// TestGRPCClient: the gRPC client submits, reads, lists and cancels, and
// its errors are the REST client's.
func TestGRPCClient(t *testing.T) {
	t.Parallel()
	g := startGRPCServer(t)
	c, err := client.NewGRPC(g.hs.URL, g.tasks)
	require.NoError(t, err)
	ctx := t.Context()
	res, err := c.Submit(ctx, wire.SubmitRequest{Workflow: "shop/ok", Input: json.RawMessage(`{"n":3}`), Tags: map[string]string{"k": "v"}})
	require.NoError(t, err)
	got, err := c.Get(ctx, res.Task.ID)
	require.NoError(t, err)
	require.Equal(t, "shop", got.Namespace)
	require.JSONEq(t, `{"n":3}`, string(got.Input))
	list, next, err := c.List(ctx, &weftv1.ListTasksRequest{Tags: []string{"k=v"}})
	require.NoError(t, err)
	require.Empty(t, next)
	require.Len(t, list, 1)
	require.NoError(t, c.Cancel(ctx, res.Task.ID, "test"))
	tests := []struct {
		name string
		err  error
		is   error
		code string
	}{
		{"unknown task", second(c.Get(ctx, 999999)), weft.ErrNotFound, wire.CodeNotFound},
		{"cancel twice", c.Cancel(ctx, res.Task.ID, ""), weft.ErrConflict, wire.CodeConflict},
		{"bad workflow", second(c.Submit(ctx, wire.SubmitRequest{Workflow: "x"})), weft.ErrInvalid, wire.CodeInvalidField},
	}
	for _, tt := range tests {
		require.ErrorIs(t, tt.err, tt.is, tt.name)
		require.True(t, client.IsCode(tt.err, tt.code), "%s: %v", tt.name, tt.err)
	}
}

func second[T any](_ T, err error) error { return err }
