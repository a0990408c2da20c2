package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/internal/apicontract"
	"github.com/weftrun/weft/internal/pgtesting"
	"github.com/weftrun/weft/server"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/store/postgres"
	"github.com/weftrun/weft/store/sqlite"
	"github.com/weftrun/weft/wire"
)

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

// env is an engine with its API on a real loopback listener.
type env struct {
	t     testing.TB
	e     *weft.Engine
	st    store.Store // the engine's store
	srv   *server.Server
	url   string
	admin string // an API key with admin:*
}

// newEnv starts an engine on s with the Go handler "go.add" (adds the
// task input's "n" to the "n" of every dependency's result) and serves it.
func newEnv(t testing.TB, s store.Store, opts server.Options) *env {
	t.Helper()
	return newEnvWith(t, s, opts, nil)
}

// newEnvWith is newEnv with the engine's Config changed by config first,
// for instance a lease that outlasts a slow machine where a test does
// not wait for leases to lapse.
func newEnvWith(t testing.TB, s store.Store, opts server.Options, config func(*weft.Config)) *env {
	t.Helper()
	cfg := weft.Config{Logger: quietLogger(), PollInterval: 50 * time.Millisecond, HeartbeatInterval: 100 * time.Millisecond,
		LeaseTTL: time.Second, ShutdownTimeout: 5 * time.Second}
	if config != nil {
		config(&cfg)
	}
	e, err := weft.New(s, cfg)
	require.NoError(t, err)
	e.Handle("go.add", func(ctx context.Context, a *weft.Attempt) (any, error) {
		var in struct{ N int }
		if err := a.Bind(&in); err != nil {
			return nil, err
		}
		sum := in.N
		for name := range a.Deps {
			var d struct{ N int }
			if err := a.Dep(name, &d); err != nil {
				return nil, err
			}
			sum += d.N
		}
		return map[string]int{"n": sum}, nil
	})
	e.Handle("go.fail", func(ctx context.Context, a *weft.Attempt) (any, error) {
		return nil, weft.Permanent(errFailed)
	})
	require.NoError(t, e.Start(context.Background()))
	t.Cleanup(func() { _ = e.Stop(context.Background()) })
	if opts.Logger == nil {
		opts.Logger = quietLogger()
	}
	srv, err := server.New(e, opts)
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })
	hs := httptest.NewServer(apicontract.Serve(t, srv))
	t.Cleanup(hs.Close)
	en := &env{t: t, e: e, st: s, srv: srv, url: hs.URL}
	en.admin = en.key(server.PermAdmin)
	return en
}

type failure string

func (f failure) Error() string { return string(f) }

const errFailed = failure("failed on purpose")

// key creates an API key with the given permissions and returns its token.
func (en *env) key(perms ...string) string {
	en.t.Helper()
	// The name says the grants, cut to what a key's name may hold.
	name := "test-" + strings.Join(perms, "+")
	token, k, err := server.NewAPIKey(name[:min(len(name), 128)], perms)
	require.NoError(en.t, err)
	require.NoError(en.t, en.st.CreateAPIKey(context.Background(), k))
	return token
}

// response is a decoded API response.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) json(t testing.TB, v any) {
	t.Helper()
	require.NoError(t, json.Unmarshal(r.body, v), "body: %s", r.body)
}

// errorCode returns the error code and field of an error response.
func (r response) errorCode(t testing.TB) (code, field string) {
	t.Helper()
	var e struct {
		Error struct{ Code, Field, Message string }
	}
	r.json(t, &e)
	require.NotEmpty(t, e.Error.Code, "body: %s", r.body)
	require.NotEmpty(t, e.Error.Message)
	return e.Error.Code, e.Error.Field
}

// do sends a request; body is JSON-encoded unless it is a string or nil.
func (en *env) do(method, path, token string, body any) response {
	en.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		data, err := json.Marshal(b)
		require.NoError(en.t, err)
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, en.url+path, rd)
	require.NoError(en.t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(en.t, err)
	defer resp.Body.Close()
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		// An event stream never ends on its own: its status and headers
		// are the answer; closing the body ends the stream.
		return response{status: resp.StatusCode, header: resp.Header}
	}
	data, err := io.ReadAll(resp.Body)
	require.NoError(en.t, err)
	return response{status: resp.StatusCode, header: resp.Header, body: data}
}

// ok sends a request as admin and requires the status.
func (en *env) ok(status int, method, path string, body any, out any) {
	en.t.Helper()
	r := en.do(method, path, en.admin, body)
	require.Equal(en.t, status, r.status, "%s %s: %s", method, path, r.body)
	if out != nil {
		r.json(en.t, out)
	}
}

// register registers a template as admin.
func (en *env) register(yaml string) {
	en.t.Helper()
	r := en.do("POST", "/v1/workflows", en.admin, map[string]string{"template": yaml})
	require.Contains(en.t, []int{200, 201}, r.status, "%s", r.body)
}

// waitTask polls a task until it is terminal.
func (en *env) waitTask(id int64) wire.Task {
	en.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var task wire.Task
		en.ok(200, "GET", "/v1/tasks/"+itoa(id), nil, &task)
		if task.State.Terminal() {
			return task
		}
		if time.Now().After(deadline) {
			en.t.Fatalf("task %d still %s", id, task.State)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitStep polls a task until its step at index i is in state st.
func (en *env) waitStep(id int64, i int, st state.Step) wire.Task {
	en.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var task wire.Task
		en.ok(200, "GET", "/v1/tasks/"+itoa(id), nil, &task)
		if task.Steps[i].State == st {
			return task
		}
		if time.Now().After(deadline) {
			en.t.Fatalf("task %d: step %d still %s", id, i, task.Steps[i].State)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func itoa(n int64) string { return strconvFormat(n) }

func strconvFormat(n int64) string { return strconv.FormatInt(n, 10) }
