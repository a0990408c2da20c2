package dashboard_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/dashboard"
	"github.com/weftrun/weft/internal/apicontract"
	"github.com/weftrun/weft/internal/pgtesting"
	"github.com/weftrun/weft/server"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/store/postgres"
	"github.com/weftrun/weft/store/sqlite"
	"github.com/weftrun/weft/workflow"
)

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// stores opens a fresh store of each kind.
var stores = map[string]func(t testing.TB) store.Store{
	"sqlite": func(t testing.TB) store.Store {
		s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "weft.db"), sqlite.Options{})
		require.NoError(t, err)
		t.Cleanup(func() { s.Close() })
		return s
	},
	"postgres": func(t testing.TB) store.Store { return pgtesting.Open(t, postgres.Options{MaxConns: 8}) },
}

// env is an engine serving the API and the dashboard on a loopback
// listener, with an admin key and a read-only key.
type env struct {
	t              testing.TB
	e              *weft.Engine
	st             store.Store // the engine's store
	url            string
	admin, reader  string
	completed      int64 // a completed checkout
	failed         int64 // a failed checkout: charge failed, ship skipped
	running        int64 // a task whose step blocks until cancelled
	awaiting       int64 // a task waiting for the signal "approved"
	authDisabled   bool
	releaseBlocked chan struct{}
	handler        http.Handler // the API and the dashboard, to call without a network

}

const checkoutFailure = "card declined"

// newEnv starts the engine with the shop workflows and one task in each
// interesting state.
func newEnv(t testing.TB, s store.Store, opts server.Options) *env {
	t.Helper()
	ctx := context.Background()
	e, err := weft.New(s, weft.Config{Logger: quietLogger(), PollInterval: 50 * time.Millisecond, HeartbeatInterval: 100 * time.Millisecond,
		LeaseTTL: 2 * time.Second, ShutdownTimeout: 5 * time.Second})
	require.NoError(t, err)
	en := &env{t: t, e: e, st: s, authDisabled: opts.DisableAuth, releaseBlocked: make(chan struct{})}
	e.Handle("shop.ok", func(ctx context.Context, a *weft.Attempt) (any, error) {
		return map[string]any{"ok": true, "step": a.Step}, nil
	})
	e.Handle("shop.charge", func(ctx context.Context, a *weft.Attempt) (any, error) {
		var in struct{ Fail bool }
		if err := a.Bind(&in); err != nil {
			return nil, err
		}
		if in.Fail {
			return nil, weft.Permanent(errors.New(checkoutFailure))
		}
		return map[string]string{"charge": "ch_1"}, nil
	})
	e.Handle("shop.block", func(ctx context.Context, a *weft.Attempt) (any, error) {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-en.releaseBlocked:
			return map[string]bool{"released": true}, nil
		}
	})
	checkout := workflow.New("shop", "checkout", "1").
		Step("validate", "shop.ok").
		Step("charge", "shop.charge", workflow.DependsOn("validate")).
		Step("reserve", "shop.ok", workflow.DependsOn("validate")).
		Step("ship", "shop.ok", workflow.DependsOn("charge", "reserve"))
	slow := workflow.New("ops", "slow", "1").Step("prepare", "shop.ok").Step("wait", "shop.block", workflow.DependsOn("prepare"))
	approval := workflow.New("ops", "approval", "1").Step("request", "shop.ok").
		Step("approved", "", workflow.DependsOn("request"), workflow.AwaitSignal("approved", 0)).
		Step("apply", "shop.ok", workflow.DependsOn("approved"))
	for _, wf := range []*workflow.Workflow{checkout, slow, approval} {
		require.NoError(t, e.Register(ctx, wf))
	}
	require.NoError(t, e.Start(ctx))
	t.Cleanup(func() {
		_ = e.Stop(context.Background())
	})
	if opts.Logger == nil {
		opts.Logger = quietLogger()
	}
	opts.UI = dashboard.New
	srv, err := server.New(e, opts)
	require.NoError(t, err)
	hs := httptest.NewServer(apicontract.Serve(t, srv))
	// End the event streams first: Close waits for open connections.
	t.Cleanup(func() { srv.Close(); hs.Close() })
	en.url, en.handler = hs.URL, srv
	en.admin = en.key("admin", server.PermAdmin)
	en.reader = en.key("reader", server.PermTasksRead, server.PermWorkflowsRead)

	en.completed = en.submit("shop/checkout", map[string]any{"order": "A-1"}, "order-A-1")
	en.failed = en.submit("shop/checkout", map[string]any{"order": "A-2", "fail": true}, "order-A-2")
	en.running = en.submit("ops/slow", map[string]any{}, "")
	en.awaiting = en.submit("ops/approval", map[string]any{}, "")
	en.waitTask(en.completed, func(t *weft.Task) bool { return t.State == state.TaskCompleted })
	en.waitTask(en.failed, func(t *weft.Task) bool { return t.State == state.TaskFailed })
	en.waitStep(en.running, "wait", state.StepRunning)
	en.waitStep(en.awaiting, "approved", state.StepWaiting)
	return en
}

func (en *env) key(name string, perms ...string) string {
	en.t.Helper()
	token, k, err := server.NewAPIKey(name, perms)
	require.NoError(en.t, err)
	require.NoError(en.t, en.st.CreateAPIKey(context.Background(), k))
	return token
}

func (en *env) submit(wf string, input any, key string) int64 {
	en.t.Helper()
	sub := weft.Submission{Workflow: wf, Input: input, Key: key}
	if key != "" {
		sub.Tags = map[string]string{"order": key}
	}
	res, err := en.e.Submit(context.Background(), sub)
	require.NoError(en.t, err)
	return res.Task.ID
}

// waitTask polls a task until ok holds, failing after a deadline.
func (en *env) waitTask(id int64, ok func(*weft.Task) bool) *weft.Task {
	en.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		task, err := en.e.Get(context.Background(), id)
		require.NoError(en.t, err)
		if ok(task) {
			return task
		}
		if time.Now().After(deadline) {
			en.t.Fatalf("task %d: condition not reached; state %s", id, task.State)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (en *env) waitStep(id int64, step string, want state.Step) {
	en.t.Helper()
	en.waitTask(id, func(t *weft.Task) bool {
		for _, s := range t.Steps {
			if s.Name == step {
				return s.State == want
			}
		}
		return false
	})
}

// client is an HTTP client that keeps cookies and does not follow
// redirects.
func client() *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// get fetches a page and returns its status and body.
func get(t testing.TB, c *http.Client, url string) (int, string) {
	t.Helper()
	res, err := c.Get(url)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, string(b)
}

// signIn posts a key to the sign-in form.
func (en *env) signIn(c *http.Client, key string) *http.Response {
	en.t.Helper()
	res, err := c.PostForm(en.url+"/signin", map[string][]string{"key": {key}, "next": {"/tasks"}})
	require.NoError(en.t, err)
	res.Body.Close()
	return res
}

func contains(t testing.TB, body string, want ...string) {
	t.Helper()
	for _, w := range want {
		require.True(t, strings.Contains(body, w), "page lacks %q", w)
	}
}
