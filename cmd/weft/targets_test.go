package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/client"
	"github.com/weftrun/weft/internal/apicontract"
	"github.com/weftrun/weft/server"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/weftdb"
	"github.com/weftrun/weft/wire"
)

// targetAction is one operator action that names a target, given a target
// that does not exist, at every way in.
type targetAction struct {
	name string
	// names is what the error must name (the target).
	names string
	// cli is the command line; it runs on the database and through the
	// server.
	cli []string
	// method, route (as openapi.json lists it), path and body are the
	// REST request.
	method, route, path string
	body                any
	goAPI               func(ctx context.Context, e *weft.Engine) error
	client              func(ctx context.Context, c *client.Client) error
}

// TestUnknownTargetsAreNotFound: every operator action that names a
// target (a namespace, a workflow, a schedule, a breaker, a webhook, a
// task or a step) refuses one that does not exist as not found, and
// changes nothing, through the Go API, the CLI (on the database and
// through a server), REST (404 with the stable code, as openapi.json
// documents) and the Go client. A namespace exists when a workflow is
// registered in it.
func TestUnknownTargetsAreNotFound(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "weft.db")
	requireCode(t, 0, weftCLI(t, "--db", db, "register", filepath.Join("..", "..", "examples", "hello.yaml")))

	ctx := t.Context()
	st, err := weftdb.Open(ctx, db, weftdb.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	quiet := slog.New(slog.DiscardHandler)
	e, err := weft.New(st, weft.Config{Logger: quiet})
	require.NoError(t, err)
	srv, err := server.New(e, server.Options{DisableAuth: true, Logger: quiet})
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })
	hs := httptest.NewServer(apicontract.Serve(t, srv))
	t.Cleanup(hs.Close)
	c, err := client.New(hs.URL, "")
	require.NoError(t, err)

	op := weft.Operator{Actor: "test"}
	n, w := 3, 3
	rate := weft.Rate{Limit: 5, Per: time.Second}
	week := 7 * 24 * time.Hour
	sched := store.ScheduleKey{Namespace: "shpo", Workflow: "x", Name: "y"}
	actions := []targetAction{
		{name: "pause namespace", names: "shpo", cli: []string{"pause", "shpo"},
			method: "POST", route: "/v1/policies", path: "/v1/policies", body: map[string]any{"target": "shpo", "paused": true},
			goAPI:  func(ctx context.Context, e *weft.Engine) error { _, err := e.Pause(ctx, "shpo", op); return err },
			client: func(ctx context.Context, c *client.Client) error { _, err := c.Pause(ctx, "shpo", ""); return err }},
		{name: "pause workflow", names: "examples/nope", cli: []string{"pause", "examples/nope"},
			method: "POST", route: "/v1/policies", path: "/v1/policies", body: map[string]any{"target": "examples/nope", "paused": true},
			goAPI: func(ctx context.Context, e *weft.Engine) error {
				_, err := e.Pause(ctx, "examples/nope", op)
				return err
			},
			client: func(ctx context.Context, c *client.Client) error {
				_, err := c.Pause(ctx, "examples/nope", "")
				return err
			}},
		{name: "resume namespace", names: "shpo", cli: []string{"resume", "shpo"},
			method: "POST", route: "/v1/policies", path: "/v1/policies", body: map[string]any{"target": "shpo", "paused": false},
			goAPI:  func(ctx context.Context, e *weft.Engine) error { _, err := e.Resume(ctx, "shpo", op); return err },
			client: func(ctx context.Context, c *client.Client) error { _, err := c.Resume(ctx, "shpo", ""); return err }},
		{name: "resume workflow", names: "shpo/x", cli: []string{"resume", "shpo/x"},
			method: "POST", route: "/v1/policies", path: "/v1/policies", body: map[string]any{"target": "shpo/x", "paused": false},
			goAPI:  func(ctx context.Context, e *weft.Engine) error { _, err := e.Resume(ctx, "shpo/x", op); return err },
			client: func(ctx context.Context, c *client.Client) error { _, err := c.Resume(ctx, "shpo/x", ""); return err }},
		{name: "limit concurrency", names: "shpo", cli: []string{"limit", "shpo", "--concurrency", "3"},
			method: "POST", route: "/v1/policies", path: "/v1/policies", body: map[string]any{"target": "shpo", "concurrency": 3},
			goAPI: func(ctx context.Context, e *weft.Engine) error {
				_, err := e.SetLimits(ctx, "shpo", weft.Limits{Concurrency: &n}, op)
				return err
			},
			client: func(ctx context.Context, c *client.Client) error {
				_, err := c.SetConcurrency(ctx, "shpo", 3, "")
				return err
			}},
		{name: "limit rate", names: "shpo", cli: []string{"limit", "shpo", "--rate", "5/s"},
			method: "POST", route: "/v1/policies", path: "/v1/policies", body: map[string]any{"target": "shpo", "rate": "5/s"},
			goAPI: func(ctx context.Context, e *weft.Engine) error {
				_, err := e.SetLimits(ctx, "shpo", weft.Limits{Rate: &rate}, op)
				return err
			},
			client: func(ctx context.Context, c *client.Client) error {
				_, err := c.SetRate(ctx, "shpo", "5/s", "")
				return err
			}},
		{name: "limit weight", names: "shpo", cli: []string{"limit", "shpo", "--weight", "3"},
			method: "POST", route: "/v1/policies", path: "/v1/policies", body: map[string]any{"target": "shpo", "weight": 3},
			goAPI: func(ctx context.Context, e *weft.Engine) error {
				_, err := e.SetLimits(ctx, "shpo", weft.Limits{Weight: &w}, op)
				return err
			},
			client: func(ctx context.Context, c *client.Client) error {
				_, err := c.SetWeight(ctx, "shpo", 3, "")
				return err
			}},
		{name: "breaker reset", names: "shpo/x/y", cli: []string{"breaker", "reset", "shpo/x/y"},
			method: "POST", route: "/v1/breakers/reset", path: "/v1/breakers/reset", body: map[string]any{"key": "shpo/x/y"},
			goAPI: func(ctx context.Context, e *weft.Engine) error {
				_, err := e.ResetBreaker(ctx, "shpo/x/y", op)
				return err
			},
			client: func(ctx context.Context, c *client.Client) error {
				_, err := c.ResetBreaker(ctx, "shpo/x/y", "")
				return err
			}},
		{name: "schedule pause", names: "shpo/x/y", cli: []string{"schedules", "pause", "shpo/x/y"},
			method: "POST", route: "/v1/schedules/{namespace}/{workflow}/{name}/pause", path: "/v1/schedules/shpo/x/y/pause", body: map[string]any{},
			goAPI: func(ctx context.Context, e *weft.Engine) error { _, err := e.PauseSchedule(ctx, sched, op); return err },
			client: func(ctx context.Context, c *client.Client) error {
				_, err := c.PauseSchedule(ctx, wire.ScheduleKey(sched), "")
				return err
			}},
		{name: "schedule resume", names: "shpo/x/y", cli: []string{"schedules", "resume", "shpo/x/y"},
			method: "POST", route: "/v1/schedules/{namespace}/{workflow}/{name}/resume", path: "/v1/schedules/shpo/x/y/resume", body: map[string]any{},
			goAPI: func(ctx context.Context, e *weft.Engine) error {
				_, err := e.ResumeSchedule(ctx, sched, op)
				return err
			},
			client: func(ctx context.Context, c *client.Client) error {
				_, err := c.ResumeSchedule(ctx, wire.ScheduleKey(sched), "")
				return err
			}},
		{name: "retention", names: "shpo", cli: []string{"retention", "shpo", "--completed", "7d"},
			method: "PUT", route: "/v1/retention/{namespace}", path: "/v1/retention/shpo", body: map[string]any{"keep": map[string]string{"completed": "7d"}},
			goAPI: func(ctx context.Context, e *weft.Engine) error {
				return e.SetRetention(ctx, "shpo", state.TaskCompleted, week, op)
			},
			client: func(ctx context.Context, c *client.Client) error {
				_, err := c.SetRetention(ctx, "shpo", map[string]string{"completed": "7d"})
				return err
			}},
		{name: "webhook of a namespace", names: "shpo", cli: []string{"webhooks", "create", "--url", "http://127.0.0.1:1/hook", "--namespace", "shpo"},
			method: "POST", route: "/v1/webhooks", path: "/v1/webhooks", body: map[string]any{"url": "http://127.0.0.1:1/hook", "namespace": "shpo"},
			goAPI: func(ctx context.Context, e *weft.Engine) error {
				_, err := e.CreateWebhook(ctx, weft.WebhookSpec{URL: "http://127.0.0.1:1/hook", Namespace: "shpo"}, op)
				return err
			},
			client: func(ctx context.Context, c *client.Client) error {
				_, err := c.CreateWebhook(ctx, wire.CreateWebhook{URL: "http://127.0.0.1:1/hook", Namespace: "shpo"})
				return err
			}},
		{name: "webhook of a workflow", names: "examples/nope", cli: []string{"webhooks", "create", "--url", "http://127.0.0.1:1/hook", "--workflow", "examples/nope"},
			method: "POST", route: "/v1/webhooks", path: "/v1/webhooks", body: map[string]any{"url": "http://127.0.0.1:1/hook", "workflow": "examples/nope"},
			goAPI: func(ctx context.Context, e *weft.Engine) error {
				_, err := e.CreateWebhook(ctx, weft.WebhookSpec{URL: "http://127.0.0.1:1/hook", Workflow: "examples/nope"}, op)
				return err
			},
			client: func(ctx context.Context, c *client.Client) error {
				_, err := c.CreateWebhook(ctx, wire.CreateWebhook{URL: "http://127.0.0.1:1/hook", Workflow: "examples/nope"})
				return err
			}},
		{name: "webhook delete", names: "99", cli: []string{"webhooks", "delete", "99"},
			method: "DELETE", route: "/v1/webhooks/{id}", path: "/v1/webhooks/99",
			goAPI:  func(ctx context.Context, e *weft.Engine) error { return e.DeleteWebhook(ctx, 99, op) },
			client: func(ctx context.Context, c *client.Client) error { return c.DeleteWebhook(ctx, 99) }},
		{name: "webhook enable", names: "99", cli: []string{"webhooks", "enable", "99"},
			method: "POST", route: "/v1/webhooks/{id}/enable", path: "/v1/webhooks/99/enable", body: map[string]any{},
			goAPI:  func(ctx context.Context, e *weft.Engine) error { return e.EnableWebhook(ctx, 99, op) },
			client: func(ctx context.Context, c *client.Client) error { _, err := c.EnableWebhook(ctx, 99); return err }},
		{name: "cancel task", names: "999", cli: []string{"cancel", "999"},
			method: "POST", route: "/v1/tasks/{id}/cancel", path: "/v1/tasks/999/cancel", body: map[string]any{},
			goAPI:  func(ctx context.Context, e *weft.Engine) error { return e.CancelAs(ctx, 999, op) },
			client: func(ctx context.Context, c *client.Client) error { return c.Cancel(ctx, 999, "") }},
		{name: "retry task", names: "999", cli: []string{"retry", "999"},
			method: "POST", route: "/v1/tasks/{id}/retry", path: "/v1/tasks/999/retry", body: map[string]any{},
			goAPI:  func(ctx context.Context, e *weft.Engine) error { return e.RetryAs(ctx, 999, op) },
			client: func(ctx context.Context, c *client.Client) error { return c.Retry(ctx, 999, "") }},
		{name: "signal task", names: "999", cli: []string{"signal", "999", "go"},
			method: "POST", route: "/v1/tasks/{id}/signals/{name}", path: "/v1/tasks/999/signals/go", body: map[string]any{},
			goAPI: func(ctx context.Context, e *weft.Engine) error {
				_, err := e.SignalAs(ctx, 999, "go", nil, op)
				return err
			},
			client: func(ctx context.Context, c *client.Client) error { _, err := c.Signal(ctx, 999, "go", nil); return err }},
		{name: "retry step", names: "999", cli: []string{"step", "retry", "999"},
			method: "POST", route: "/v1/steps/{id}/retry", path: "/v1/steps/999/retry", body: map[string]any{},
			goAPI:  func(ctx context.Context, e *weft.Engine) error { return e.RetryStep(ctx, 999, op) },
			client: func(ctx context.Context, c *client.Client) error { _, err := c.RetryStep(ctx, 999, ""); return err }},
		{name: "resolve step", names: "999", cli: []string{"step", "resolve", "999", "--result", "{}"},
			method: "POST", route: "/v1/steps/{id}/resolve", path: "/v1/steps/999/resolve", body: map[string]any{},
			goAPI: func(ctx context.Context, e *weft.Engine) error {
				return e.ResolveStep(ctx, weft.StepResolution{StepID: 999, EngineID: "test"})
			},
			client: func(ctx context.Context, c *client.Client) error {
				_, err := c.ResolveStep(ctx, 999, json.RawMessage(`{}`), "")
				return err
			}},
		{name: "complete step", names: "999",
			method: "POST", route: "/v1/steps/{id}/complete", path: "/v1/steps/999/complete", body: map[string]any{"result": map[string]any{}},
			goAPI: func(ctx context.Context, e *weft.Engine) error {
				return e.ResolveStep(ctx, weft.StepResolution{StepID: 999, EngineID: "test", Result: json.RawMessage(`{}`)})
			}},
		{name: "delete task", names: "999", cli: []string{"delete", "999"},
			method: "POST", route: "/v1/tasks/delete", path: "/v1/tasks/delete", body: map[string]any{"ids": []int64{999}},
			goAPI: func(ctx context.Context, e *weft.Engine) error {
				_, err := e.DeleteTasks(ctx, weft.BulkRequest{IDs: []int64{999}})
				return err
			},
			client: func(ctx context.Context, c *client.Client) error {
				_, err := c.DeleteTasks(ctx, wire.BulkRequest{IDs: []int64{999}})
				return err
			}},
		{name: "cancel tasks of a namespace", names: "shpo", cli: []string{"cancel", "--namespace", "shpo"},
			method: "POST", route: "/v1/tasks/cancel", path: "/v1/tasks/cancel", body: map[string]any{"filter": map[string]any{"namespace": "shpo"}},
			goAPI: func(ctx context.Context, e *weft.Engine) error {
				_, err := e.CancelTasks(ctx, weft.BulkRequest{Filter: store.TaskFilter{Namespace: "shpo"}})
				return err
			},
			client: func(ctx context.Context, c *client.Client) error {
				_, err := c.CancelTasks(ctx, wire.BulkRequest{Filter: wire.TaskFilter{Namespace: "shpo"}})
				return err
			}},
		{name: "retry tasks of a workflow", names: "nope", cli: []string{"retry", "--workflow", "examples/nope"},
			method: "POST", route: "/v1/tasks/retry", path: "/v1/tasks/retry", body: map[string]any{"filter": map[string]any{"workflow": "examples/nope"}},
			goAPI: func(ctx context.Context, e *weft.Engine) error {
				_, err := e.RetryTasks(ctx, weft.BulkRequest{Filter: store.TaskFilter{Namespace: "examples", Workflow: "nope"}})
				return err
			},
			client: func(ctx context.Context, c *client.Client) error {
				_, err := c.RetryTasks(ctx, wire.BulkRequest{Filter: wire.TaskFilter{Workflow: "examples/nope"}})
				return err
			}},
		{name: "delete tasks of a namespace", names: "shpo", cli: []string{"delete", "--namespace", "shpo", "--state", "failed"},
			method: "POST", route: "/v1/tasks/delete", path: "/v1/tasks/delete", body: map[string]any{"filter": map[string]any{"namespace": "shpo", "state": "failed"}},
			goAPI: func(ctx context.Context, e *weft.Engine) error {
				_, err := e.DeleteTasks(ctx, weft.BulkRequest{Filter: store.TaskFilter{Namespace: "shpo", State: state.TaskFailed}})
				return err
			},
			client: func(ctx context.Context, c *client.Client) error {
				_, err := c.DeleteTasks(ctx, wire.BulkRequest{Filter: wire.TaskFilter{Namespace: "shpo", State: "failed"}})
				return err
			}},
		{name: "prune a namespace", names: "shpo", cli: []string{"prune", "--older-than", "7d", "--state", "failed", "--namespace", "shpo"},
			method: "POST", route: "/v1/tasks/prune", path: "/v1/tasks/prune", body: map[string]any{"state": "failed", "older_than": "7d", "namespace": "shpo"},
			goAPI: func(ctx context.Context, e *weft.Engine) error {
				_, err := e.Prune(ctx, state.TaskFailed, week, weft.BulkRequest{Filter: store.TaskFilter{Namespace: "shpo"}})
				return err
			},
			client: func(ctx context.Context, c *client.Client) error {
				_, err := c.Prune(ctx, wire.PruneRequest{State: "failed", OlderThan: "7d", Namespace: "shpo"})
				return err
			}},
	}

	spec := openAPINotFound(t)
	for _, a := range actions {
		t.Run(a.name, func(t *testing.T) {
			t.Parallel()
			err := a.goAPI(ctx, e)
			require.ErrorIs(t, err, weft.ErrNotFound, "Go API")
			require.Contains(t, err.Error(), a.names, "Go API")

			if a.client != nil {
				err = a.client(ctx, c)
				require.ErrorIs(t, err, weft.ErrNotFound, "Go client")
				require.Contains(t, err.Error(), a.names, "Go client")
			}

			var body io.Reader
			if a.body != nil {
				b, err := json.Marshal(a.body)
				require.NoError(t, err)
				body = bytes.NewReader(b)
			}
			req, err := http.NewRequestWithContext(ctx, a.method, hs.URL+a.path, body)
			require.NoError(t, err)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.NoError(t, err)
			require.Equal(t, http.StatusNotFound, resp.StatusCode, "REST %s %s: %s", a.method, a.path, b)
			var apiErr struct {
				Error struct{ Code, Message string }
			}
			require.NoError(t, json.Unmarshal(b, &apiErr), "%s", b)
			require.Equal(t, server.CodeNotFound, apiErr.Error.Code)
			require.Contains(t, apiErr.Error.Message, a.names)
			require.True(t, spec[a.method+" "+a.route], "openapi.json lists 404 for %s %s", a.method, a.route)

			if a.cli != nil {
				for _, via := range [][]string{{"--db", db}, {"--server", hs.URL}} {
					r := weftCLI(t, append(via, a.cli...)...)
					require.Equal(t, exitFailed, r.code, "weft %s %v:\n%s%s", via[0], a.cli, r.stdout, r.stderr)
					require.Contains(t, r.stderr, a.names, "weft %s %v", via[0], a.cli)
					require.Contains(t, r.stderr, "not found", "weft %s %v", via[0], a.cli)
				}
			}
		})
	}
	t.Cleanup(func() {
		// Nothing was changed: no policy, retention or webhook exists.
		report, err := e.Policies(context.Background())
		require.NoError(t, err)
		require.Empty(t, report.Policies)
		rs, err := e.Retentions(context.Background())
		require.NoError(t, err)
		require.Empty(t, rs)
		hooks, err := e.Webhooks(context.Background())
		require.NoError(t, err)
		require.Empty(t, hooks)
	})
}

// openAPINotFound returns the operations ("POST /v1/policies") for which
// openapi.json documents a 404.
func openAPINotFound(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "server", "openapi.json"))
	require.NoError(t, err)
	var doc struct {
		Paths map[string]map[string]struct {
			Responses map[string]json.RawMessage `json:"responses"`
		} `json:"paths"`
	}
	require.NoError(t, json.Unmarshal(b, &doc))
	out := map[string]bool{}
	for path, ops := range doc.Paths {
		for method, op := range ops {
			if _, ok := op.Responses["404"]; ok {
				out[strings.ToUpper(method)+" "+path] = true
			}
		}
	}
	return out
}

// registerWorkflows registers, on db, a one-step workflow for each of
// names ("ns/name", or "ns" for ns/x), so that operator actions may name
// them.
func registerWorkflows(t *testing.T, db string, names ...string) {
	t.Helper()
	dir := t.TempDir()
	for i, n := range names {
		ns, name, ok := strings.Cut(n, "/")
		if !ok {
			name = "x"
		}
		tpl := writeFile(t, dir, fmt.Sprintf("%d.yaml", i),
			fmt.Sprintf("namespace: %s\nname: %s\nversion: \"1\"\nsteps:\n  - name: s\n    handler: exec\n    config: {command: [\"true\"]}\n", ns, name))
		requireCode(t, 0, weftCLI(t, "--db", db, "register", tpl))
	}
}
