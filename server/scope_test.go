package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/server"
	"github.com/weftrun/weft/wire"
)

func TestParseGrant(t *testing.T) {
	t.Parallel()
	tests := []struct {
		grant, perm string
		namespaces  []string
		err         string
	}{
		{"tasks:read", "tasks:read", nil, ""},
		{"tasks:read@*", "tasks:read", nil, ""},
		{"tasks:read@shop", "tasks:read", []string{"shop"}, ""},
		{"admin:*@shop,billing", "admin:*", []string{"shop", "billing"}, ""},
		{"tasks:*@a.b-c_d", "tasks:*", []string{"a.b-c_d"}, ""},
		{"tasks:read@", "", nil, "no namespace after '@'"},
		{"tasks:read@shop,", "", nil, "not a valid name"},
		{"tasks:read@shop,shop", "", nil, "listed twice"},
		{"tasks:read@shop,*", "", nil, "'*' stands alone"},
		{"tasks:read@sh op", "", nil, "not a valid name"},
		{"tasks:nope@shop", "", nil, "unknown permission"},
		{"tasks:read@shop@x", "", nil, "not a valid name"},
	}
	for _, tt := range tests {
		t.Run(tt.grant, func(t *testing.T) {
			t.Parallel()
			perm, nss, err := server.ParseGrant(tt.grant)
			if tt.err != "" {
				require.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.perm, perm)
			require.Equal(t, tt.namespaces, nss)
		})
	}
}

func TestScopeOf(t *testing.T) {
	t.Parallel()
	all := server.Scope{All: true}
	tests := []struct {
		name   string
		grants []string
		need   string
		want   server.Scope
	}{
		{"unscoped grant", []string{"tasks:read"}, "tasks:read", all},
		{"star", []string{"tasks:read@*"}, "tasks:read", all},
		{"scoped", []string{"tasks:read@shop"}, "tasks:read", server.Scope{Namespaces: []string{"shop"}}},
		{"union, sorted", []string{"tasks:read@shop", "tasks:*@billing,shop"}, "tasks:read", server.Scope{Namespaces: []string{"billing", "shop"}}},
		{"admin scoped", []string{"admin:*@shop"}, "policies:write", server.Scope{Namespaces: []string{"shop"}}},
		{"all wins", []string{"tasks:read@shop", "admin:*"}, "tasks:read", all},
		{"other permission", []string{"tasks:read@shop"}, "tasks:create", server.Scope{}},
		{"bad grant grants nothing", []string{"tasks:read@", "tasks:read@sh op"}, "tasks:read", server.Scope{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, server.ScopeOf(tt.grants, tt.need))
			require.Equal(t, !tt.want.None(), server.Allowed(tt.grants, tt.need))
		})
	}
}

func TestSplitAndScopeGrants(t *testing.T) {
	t.Parallel()
	got, err := server.SplitGrants("tasks:read@shop,billing, tasks:create,workers:connect@shop")
	require.NoError(t, err)
	require.Equal(t, []string{"tasks:read@shop,billing", "tasks:create", "workers:connect@shop"}, got)
	_, err = server.SplitGrants("shop,tasks:read")
	require.ErrorContains(t, err, `"shop" is not a permission`)
	_, err = server.SplitGrants("tasks:read,shop")
	require.ErrorContains(t, err, `"shop" is not a permission`)

	scoped, err := server.ScopeGrants(got, []string{"ops"})
	require.NoError(t, err)
	require.Equal(t, []string{"tasks:read@shop,billing", "tasks:create@ops", "workers:connect@shop"}, scoped, "an explicit scope stays")
	same, err := server.ScopeGrants(got, []string{"*"})
	require.NoError(t, err)
	require.Equal(t, got, same)
	_, err = server.ScopeGrants(got, []string{"*", "shop"})
	require.ErrorContains(t, err, "stands alone")
	_, err = server.ScopeGrants(got, []string{"bad name"})
	require.ErrorContains(t, err, "namespaces")
}

// scopeTemplate is a workflow of namespace NS: a signal wait, a remote step
// and a schedule.
func scopeTemplate(ns, version string) string {
	return fmt.Sprintf(`namespace: %s
name: gate
version: "%s"
steps:
  - name: approval
    type: signal
    signal: {name: go_live}
  - name: work
    handler: remote.work
schedules:
  - name: nightly
    cron: "0 3 * * *"
`, ns, version)
}

// scopeFixture is what one namespace holds.
type scopeFixture struct {
	ns                string
	task, step, hook  int64
	doomedHook        int64 // the webhook the matrix deletes
	tasks, cancelled  []int64
	workflow, version string
}

const (
	inNS  = "shop"
	outNS = "billing" // never named in an answer to a key bound to shop
)

// TestNamespaceScopeMatrix checks every route with a key whose every
// permission holds in one namespace: what lies in it is reached, what lies
// in another is not found (or, where the caller names the namespace of a
// write, forbidden), lists and streams show nothing of it, and the other
// namespace's name never appears in an answer it did not ask about. A key
// for every namespace reaches both. Every route must have a case here: a
// route added later without one fails.
func TestNamespaceScopeMatrix(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		en := newEnvWith(t, open(t), server.Options{MaxPoll: 5 * time.Second}, nil)
		fx := map[string]*scopeFixture{}
		for _, ns := range []string{outNS, inNS} {
			f := &scopeFixture{ns: ns, workflow: ns + "/gate", version: "1"}
			fx[ns] = f
			en.register(scopeTemplate(ns, "1"))
			for range 3 {
				var task wire.Task
				en.ok(201, "POST", "/v1/tasks", map[string]any{"workflow": f.workflow}, &task)
				f.tasks = append(f.tasks, task.ID)
			}
			var cancelled wire.Task
			en.ok(201, "POST", "/v1/tasks", map[string]any{"workflow": f.workflow}, &cancelled)
			en.ok(200, "POST", fmt.Sprintf("/v1/tasks/%d/cancel", cancelled.ID), nil, nil)
			f.cancelled = []int64{cancelled.ID}
			f.task = f.tasks[0]
			var full wire.Task
			en.ok(200, "GET", fmt.Sprintf("/v1/tasks/%d", f.task), nil, &full)
			f.step = full.Steps[0].ID
			var hook wire.Webhook
			en.ok(201, "POST", "/v1/webhooks", map[string]any{"url": "http://127.0.0.1:9/" + ns, "namespace": ns}, &hook)
			f.hook = hook.ID
			en.ok(201, "POST", "/v1/webhooks", map[string]any{"url": "http://127.0.0.1:9/" + ns, "namespace": ns}, &hook)
			f.doomedHook = hook.ID
			en.ok(200, "POST", "/v1/policies", map[string]any{"target": ns, "weight": 2}, nil)
			en.ok(200, "PUT", "/v1/retention/"+ns, map[string]any{"keep": map[string]string{"completed": "7d"}}, nil)
		}
		var grants []string
		for _, p := range server.Permissions {
			if p != server.PermAdmin {
				grants = append(grants, p+"@"+inNS)
			}
		}
		scoped := en.key(grants...)
		all := en.key(server.PermAdmin)

		// How a route's answer to the scoped key depends on the namespace.
		const (
			lookup     = "lookup"     // the other namespace's object is not found
			write      = "write"      // a write into the other namespace is forbidden
			list       = "list"       // the answer shows the key's namespace alone
			everywhere = "everywhere" // the key needs the permission in every namespace
		)
		type request struct {
			method, path string
			body         any
		}
		type scopeCase struct {
			kind string
			req  func(f *scopeFixture) request
		}
		// In scope, these objects may not exist (no breaker opened): 404
		// is an answer there.
		absent := map[string]bool{"POST /v1/breakers/reset": true}
		get := func(path string) func(*scopeFixture) request {
			return func(*scopeFixture) request { return request{"GET", path, nil} }
		}
		cases := map[string]scopeCase{
			"POST /v1/workflows": {write, func(f *scopeFixture) request {
				return request{"POST", "/v1/workflows", map[string]string{"template": scopeTemplate(f.ns, "1")}}
			}},
			"GET /v1/workflows": {list, get("/v1/workflows")},
			"POST /v1/workflows/validate": {write, func(f *scopeFixture) request {
				return request{"POST", "/v1/workflows/validate", map[string]string{"template": scopeTemplate(f.ns, "2")}}
			}},
			"GET /v1/workflows/{namespace}/{name}/versions/{version}": {lookup, func(f *scopeFixture) request {
				return request{"GET", "/v1/workflows/" + f.ns + "/gate/versions/1", nil}
			}},
			"GET /v1/schedules": {list, get("/v1/schedules")},
			"GET /v1/schedules/{namespace}/{workflow}/{name}": {lookup, func(f *scopeFixture) request {
				return request{"GET", "/v1/schedules/" + f.ns + "/gate/nightly", nil}
			}},
			"POST /v1/schedules/{namespace}/{workflow}/{name}/pause": {lookup, func(f *scopeFixture) request {
				return request{"POST", "/v1/schedules/" + f.ns + "/gate/nightly/pause", nil}
			}},
			"POST /v1/schedules/{namespace}/{workflow}/{name}/resume": {lookup, func(f *scopeFixture) request {
				return request{"POST", "/v1/schedules/" + f.ns + "/gate/nightly/resume", nil}
			}},
			"POST /v1/tasks": {write, func(f *scopeFixture) request {
				return request{"POST", "/v1/tasks", map[string]any{"workflow": f.workflow}}
			}},
			"POST /v1/tasks/batch": {write, func(f *scopeFixture) request {
				return request{"POST", "/v1/tasks/batch", map[string]any{"tasks": []any{map[string]any{"workflow": inNS + "/gate"}, map[string]any{"workflow": f.workflow}}}}
			}},
			"GET /v1/tasks":      {list, get("/v1/tasks")},
			"GET /v1/tasks/{id}": {lookup, func(f *scopeFixture) request { return request{"GET", fmt.Sprintf("/v1/tasks/%d", f.task), nil} }},
			"GET /v1/tasks/{id}/audit": {lookup, func(f *scopeFixture) request {
				return request{"GET", fmt.Sprintf("/v1/tasks/%d/audit", f.task), nil}
			}},
			"POST /v1/tasks/{id}/signals/{name}": {lookup, func(f *scopeFixture) request {
				return request{"POST", fmt.Sprintf("/v1/tasks/%d/signals/other", f.task), nil}
			}},
			"POST /v1/tasks/{id}/retry": {lookup, func(f *scopeFixture) request {
				return request{"POST", fmt.Sprintf("/v1/tasks/%d/retry", f.task), nil}
			}},
			"POST /v1/tasks/{id}/cancel": {lookup, func(f *scopeFixture) request {
				return request{"POST", fmt.Sprintf("/v1/tasks/%d/cancel", f.tasks[2]), nil}
			}},
			"GET /v1/events": {list, get("/v1/events?after=start")},
			"POST /v1/webhooks": {write, func(f *scopeFixture) request {
				return request{"POST", "/v1/webhooks", map[string]any{"url": "http://127.0.0.1:9/x", "workflow": f.workflow}}
			}},
			"GET /v1/webhooks": {list, get("/v1/webhooks")},
			"POST /v1/webhooks/{id}/enable": {lookup, func(f *scopeFixture) request {
				return request{"POST", fmt.Sprintf("/v1/webhooks/%d/enable", f.hook), nil}
			}},
			"DELETE /v1/webhooks/{id}": {lookup, func(f *scopeFixture) request {
				return request{"DELETE", fmt.Sprintf("/v1/webhooks/%d", f.doomedHook), nil}
			}},
			"POST /v1/tasks/cancel": {lookup, func(f *scopeFixture) request {
				return request{"POST", "/v1/tasks/cancel", map[string]any{"filter": map[string]any{"namespace": f.ns}, "dry_run": true}}
			}},
			"POST /v1/tasks/retry": {lookup, func(f *scopeFixture) request {
				return request{"POST", "/v1/tasks/retry", map[string]any{"ids": f.tasks[1:2], "dry_run": true}}
			}},
			"POST /v1/tasks/delete": {lookup, func(f *scopeFixture) request {
				return request{"POST", "/v1/tasks/delete", map[string]any{"filter": map[string]any{"workflow": f.workflow}, "dry_run": true}}
			}},
			"POST /v1/tasks/prune": {lookup, func(f *scopeFixture) request {
				return request{"POST", "/v1/tasks/prune", map[string]any{"state": "cancelled", "older_than": "1d", "namespace": f.ns, "dry_run": true}}
			}},
			"GET /v1/retention": {list, get("/v1/retention")},
			"PUT /v1/retention/{namespace}": {lookup, func(f *scopeFixture) request {
				return request{"PUT", "/v1/retention/" + f.ns, map[string]any{"keep": map[string]string{"failed": "30d"}}}
			}},
			"GET /v1/workers": {list, get("/v1/workers")},
			"GET /v1/oplog":   {everywhere, get("/v1/oplog")},
			"GET /v1/steps/{id}": {lookup, func(f *scopeFixture) request {
				return request{"GET", fmt.Sprintf("/v1/steps/%d", f.step), nil}
			}},
			"POST /v1/steps/{id}/retry": {lookup, func(f *scopeFixture) request {
				return request{"POST", fmt.Sprintf("/v1/steps/%d/retry", f.step), nil}
			}},
			"POST /v1/steps/{id}/resolve": {lookup, func(f *scopeFixture) request {
				return request{"POST", fmt.Sprintf("/v1/steps/%d/resolve", f.step), map[string]any{"reason": "by hand"}}
			}},
			"POST /v1/steps/{id}/complete": {lookup, func(f *scopeFixture) request {
				return request{"POST", fmt.Sprintf("/v1/steps/%d/complete", f.step), map[string]any{"result": map[string]int{"n": 1}}}
			}},
			"POST /v1/workers": {write, func(f *scopeFixture) request {
				return request{"POST", "/v1/workers", map[string]any{"name": "w", "handlers": []string{"remote.work"}, "namespaces": []string{f.ns}}}
			}},
			"GET /v1/policies": {list, get("/v1/policies")},
			"POST /v1/policies": {write, func(f *scopeFixture) request {
				return request{"POST", "/v1/policies", map[string]any{"target": f.workflow, "weight": 3}}
			}},
			"GET /v1/policies/changes": {list, get("/v1/policies/changes")},
			"POST /v1/breakers/reset": {write, func(f *scopeFixture) request {
				return request{"POST", "/v1/breakers/reset", map[string]any{"key": f.workflow + "/work"}}
			}},
		}
		// The worker routes of a worker: the scoped key's own worker
		// takes only its namespace's steps (workerScope below).
		workerRoutes := map[string]bool{"DELETE /v1/workers/{id}": true, "POST /v1/workers/{id}/claim": true,
			"POST /v1/workers/{id}/heartbeat": true, "POST /v1/workers/{id}/complete": true, "POST /v1/workers/{id}/fail": true,
			"POST /v1/workers/{id}/checkpoint": true, "POST /v1/workers/{id}/progress": true, "POST /v1/workers/{id}/calls": true}

		for _, rt := range en.srv.Routes() {
			name := rt.Method + " " + rt.Path
			if rt.Permission == "" {
				continue
			}
			require.NotEmpty(t, rt.Scope, "%s declares where its namespace is known", name)
			if workerRoutes[name] {
				continue
			}
			c, ok := cases[name]
			require.True(t, ok, "%s has no case in the namespace scope matrix", name)
			t.Run(name, func(t *testing.T) {
				send := func(token string, f *scopeFixture) response {
					rq := c.req(f)
					if rt.Path == "/v1/events" {
						return response{status: en.streamStatus(t, rq.path, token)}
					}
					return en.do(rq.method, rq.path, token, rq.body)
				}
				// Out of scope first, so that a write in scope does not
				// change what the other request finds.
				out := send(scoped, fx[outNS])
				in := send(scoped, fx[inNS])
				switch {
				case absent[name]:
					require.NotContains(t, []int{401, 403}, in.status, "in scope: %s", in.body)
				case c.kind != everywhere:
					require.NotContains(t, []int{401, 403, 404}, in.status, "in scope: %s", in.body)
				}
				switch c.kind {
				case lookup:
					require.Equal(t, http.StatusNotFound, out.status, "out of scope: %s", out.body)
					if rq := c.req(fx[outNS]); !strings.Contains(rq.path+fmt.Sprint(rq.body), outNS) {
						require.NotContains(t, string(out.body), outNS, "a lookup by id names nothing of the other namespace")
					}
				case write:
					require.Equal(t, http.StatusForbidden, out.status, "out of scope: %s", out.body)
					code, field := out.errorCode(t)
					require.Equal(t, server.CodeForbidden, code)
					require.NotEmpty(t, field, "the refusal names the field that named the namespace")
				case list:
					require.Equal(t, in.status, out.status)
					require.NotContains(t, string(in.body), outNS, "a list shows nothing of the other namespace")
				case everywhere:
					require.Equal(t, http.StatusForbidden, out.status)
					require.Equal(t, http.StatusForbidden, in.status)
				}
				if c.kind != everywhere {
					// A key for every namespace reaches the other one.
					r := send(all, fx[outNS])
					require.NotContains(t, []int{401, 403}, r.status, "with admin:*: %s", r.body)
					if !absent[name] {
						require.NotEqual(t, 404, r.status, "with admin:*: %s", r.body)
					}
				} else {
					require.Equal(t, 200, send(all, fx[outNS]).status)
				}
			})
		}

		t.Run("lists hold the key's namespace", func(t *testing.T) {
			var tasks wire.TaskList
			r := en.do("GET", "/v1/tasks", scoped, nil)
			require.Equal(t, 200, r.status)
			r.json(t, &tasks)
			require.NotEmpty(t, tasks.Tasks)
			for _, task := range tasks.Tasks {
				require.Equal(t, inNS, task.Namespace)
			}
			r = en.do("GET", "/v1/tasks?namespace="+outNS, scoped, nil)
			require.Equal(t, 200, r.status)
			r.json(t, &tasks)
			require.Empty(t, tasks.Tasks, "a filter never reaches outside the key's namespaces")

			var res wire.BulkResult
			r = en.do("POST", "/v1/tasks/cancel", scoped, map[string]any{"all": true, "dry_run": true})
			require.Equal(t, 200, r.status, "%s", r.body)
			r.json(t, &res)
			var inScope wire.BulkResult
			en.ok(200, "POST", "/v1/tasks/cancel", map[string]any{"filter": map[string]any{"namespace": inNS}, "dry_run": true}, &inScope)
			require.Equal(t, inScope.Matched, res.Matched, "all is all of the key's namespaces")
			r = en.do("POST", "/v1/tasks/cancel", scoped, map[string]any{"ids": []int64{fx[inNS].task, fx[outNS].task}, "dry_run": true})
			require.Equal(t, 404, r.status, "one task out of scope is not found: %s", r.body)
			require.NotContains(t, string(r.body), outNS)

			r = en.do("POST", "/v1/webhooks", scoped, map[string]any{"url": "http://127.0.0.1:9/x"})
			require.Equal(t, 400, r.status, "a webhook of a scoped key names its namespace: %s", r.body)
			require.Equal(t, 403, en.do("POST", "/v1/policies", scoped, map[string]any{"target": "*", "weight": 2}).status,
				"a policy for all work needs the permission everywhere")
		})

		t.Run("the event stream shows the key's namespace", func(t *testing.T) {
			// The last event of the history is the key's namespace's: once
			// it is read, every event before it was.
			var last wire.Task
			en.ok(201, "POST", "/v1/tasks", map[string]any{"workflow": inNS + "/gate"}, &last)
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, "GET", en.url+"/v1/events?after=start", nil)
			require.NoError(t, err)
			req.Header.Set("Authorization", "Bearer "+scoped)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			require.Equal(t, 200, resp.StatusCode)
			sc := bufio.NewScanner(resp.Body)
			seen := 0
			for sc.Scan() {
				data, ok := strings.CutPrefix(sc.Text(), "data: ")
				if !ok {
					continue
				}
				var ev wire.Event
				require.NoError(t, json.Unmarshal([]byte(data), &ev))
				require.Equal(t, inNS, ev.Namespace, "an event of another namespace: %s", data)
				seen++
				if ev.TaskID == last.ID {
					break
				}
			}
			require.NoError(t, ctx.Err(), "the stream reached the last event")
			require.Positive(t, seen)
		})

		t.Run("workers", func(t *testing.T) {
			// A worker of the scoped key that names no namespace takes
			// steps of its key's alone; naming another is forbidden.
			r := en.do("POST", "/v1/workers", scoped, map[string]any{"name": "w", "handlers": []string{"remote.work"}})
			require.Equal(t, 201, r.status, "%s", r.body)
			var reg wire.WorkerRegistered
			r.json(t, &reg)
			require.Equal(t, []string{inNS}, reg.Namespaces)
			claimPath := "/v1/workers/" + reg.WorkerID + "/claim"
			r = en.do("POST", claimPath, scoped, map[string]any{"handlers": []string{"remote.work"}, "namespaces": []string{outNS}})
			require.Equal(t, 403, r.status, "%s", r.body)
			var claimedAll []wire.ClaimedStep
			for {
				r = en.do("POST", claimPath, scoped, map[string]any{"handlers": []string{"remote.work"}, "max": 100})
				require.Equal(t, 200, r.status, "%s", r.body)
				var got wire.ClaimResponse
				r.json(t, &got)
				if len(got.Steps) == 0 {
					break
				}
				claimedAll = append(claimedAll, got.Steps...)
			}
			require.NotEmpty(t, claimedAll)
			for _, c := range claimedAll {
				require.Equal(t, inNS, c.Namespace)
				r = en.do("POST", "/v1/workers/"+reg.WorkerID+"/complete", scoped, map[string]any{"fence": c.Fence, "result": map[string]int{}})
				require.Equal(t, 200, r.status, "%s", r.body)
			}
			// The other namespace's steps wait for a worker that may take
			// them.
			r = en.do("POST", "/v1/workers", all, map[string]any{"name": "w2", "handlers": []string{"remote.work"}, "namespaces": []string{outNS}})
			require.Equal(t, 201, r.status, "%s", r.body)
			r.json(t, &reg)
			r = en.do("POST", "/v1/workers/"+reg.WorkerID+"/claim", all, map[string]any{"handlers": []string{"remote.work"}, "max": 100})
			require.Equal(t, 200, r.status, "%s", r.body)
			var got wire.ClaimResponse
			r.json(t, &got)
			require.NotEmpty(t, got.Steps, "the other namespace's steps were left")
			// Another credential's worker is not the scoped key's.
			r = en.do("POST", "/v1/workers/"+reg.WorkerID+"/heartbeat", scoped, map[string]any{"steps": []any{}})
			require.Contains(t, []int{403, 404}, r.status, "%s", r.body)
			var workers wire.WorkerList
			r = en.do("GET", "/v1/workers", scoped, nil)
			r.json(t, &workers)
			for _, w := range workers.Workers {
				require.NotEqual(t, reg.WorkerID, w.ID, "the scoped key sees its own workers alone")
			}
		})
	})
}
