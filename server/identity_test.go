package server_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/server"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/wire"
)

// TestWorkerIdentity: a worker id belongs to the credential that
// registered it. Another key with workers:connect, the server's own engine
// id and an unknown id all get 404 not_found on every worker route (the
// same answer, so a caller learns nothing of ids that are not its own),
// and none of those calls changes anything.
func TestWorkerIdentity(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		// The worker sends no heartbeat while the other callers try its
		// routes: a lease that outlasts a loaded machine's 28 requests.
		en := newEnvWith(t, open(t), server.Options{MaxPoll: 20 * time.Second}, func(c *weft.Config) { c.LeaseTTL = time.Minute })
		en.register(mixedTemplate)
		mine := en.worker(t, "py.enrich")
		var task wire.Task
		en.ok(201, "POST", "/v1/tasks", map[string]any{"workflow": "demo/mixed", "input": map[string]int{"n": 3}}, &task)
		steps := mine.claim(t, 15000)
		require.Len(t, steps, 1)
		fence := steps[0].Fence

		other := en.key(server.PermWorkersConnect)
		routes := []struct {
			method, suffix string
			body           any
		}{
			{"DELETE", "", nil},
			{"POST", "/claim", map[string]any{"handlers": []string{"py.enrich"}, "max": 1}},
			{"POST", "/heartbeat", map[string]any{"steps": []any{fence}}},
			{"POST", "/complete", map[string]any{"fence": fence, "result": map[string]int{"n": 666}}},
			{"POST", "/fail", map[string]any{"fence": fence, "error": "not yours", "permanent": true}},
			{"POST", "/checkpoint", map[string]any{"fence": fence, "checkpoint": map[string]int{"stolen": 1}}},
			{"POST", "/progress", map[string]any{"fence": fence, "fraction": 0.9}},
		}
		callers := []struct {
			name, id, token string
		}{
			{"another key's worker", mine.id, other},
			{"the server's own engine", en.e.ID(), other},
			{"the server's own engine, as admin", en.e.ID(), en.admin},
			{"an unknown id", "remote-nobody-000000000000", other},
		}
		for _, c := range callers {
			for _, rt := range routes {
				r := en.do(rt.method, "/v1/workers/"+c.id+rt.suffix, c.token, rt.body)
				require.Equal(t, 404, r.status, "%s: %s %s: %s", c.name, rt.method, rt.suffix, r.body)
				code, _ := r.errorCode(t)
				require.Equal(t, server.CodeNotFound, code, c.name)
			}
		}

		// Nothing of the above took effect: the server's engine and the
		// worker are live, and the worker's step is still its own.
		live, err := en.st.ListEngines(context.Background())
		require.NoError(t, err)
		ids := map[string]bool{}
		for _, l := range live {
			ids[l.ID] = true
		}
		require.True(t, ids[en.e.ID()], "the server's engine was not stopped")
		require.True(t, ids[mine.id], "the worker was not stopped")

		// Its owner uses it on every route.
		r := mine.post("/heartbeat", map[string]any{"steps": []any{fence}})
		require.Equal(t, 200, r.status, "%s", r.body)
		require.Contains(t, string(r.body), `"lost":[]`)
		require.Equal(t, 204, mine.post("/progress", map[string]any{"fence": fence, "fraction": 0.5}).status)
		require.Equal(t, 204, mine.post("/checkpoint", map[string]any{"fence": fence, "checkpoint": map[string]int{"done": 1}}).status)
		require.Equal(t, 200, mine.post("/claim", map[string]any{"handlers": []string{"py.enrich"}, "max": 1}).status)
		r = mine.post("/complete", map[string]any{"fence": fence, "result": map[string]int{"n": 30}})
		require.Equal(t, 200, r.status, "%s", r.body)
		done := en.waitTask(task.ID)
		require.Equal(t, state.TaskCompleted, done.State)
		require.JSONEq(t, `{"done":1}`, string(stepNamed(t, done, "enrich").Checkpoint))
		r = en.do("DELETE", "/v1/workers/"+mine.id, mine.token, nil)
		require.Equal(t, 204, r.status, "%s", r.body)
	})
}

// TestWorkerIdentityDevMode: with authentication disabled, workers work
// without credentials as before, but an engine's id is still no worker.
func TestWorkerIdentityDevMode(t *testing.T) {
	t.Parallel()
	en := newEnv(t, backends()["sqlite"](t), server.Options{DisableAuth: true})
	r := en.do("POST", "/v1/workers", "", map[string]any{"name": "dev", "handlers": []string{"py.enrich"}})
	require.Equal(t, 201, r.status, "%s", r.body)
	var reg struct {
		WorkerID string `json:"worker_id"`
	}
	r.json(t, &reg)
	r = en.do("POST", "/v1/workers/"+reg.WorkerID+"/heartbeat", "", map[string]any{"steps": []any{}})
	require.Equal(t, 200, r.status, "%s", r.body)
	r = en.do("POST", "/v1/workers/"+reg.WorkerID+"/claim", "", map[string]any{"handlers": []string{"py.enrich"}})
	require.Equal(t, 200, r.status, "%s", r.body)
	r = en.do("DELETE", "/v1/workers/"+en.e.ID(), "", nil)
	require.Equal(t, 404, r.status, "%s", r.body)
	require.Equal(t, 204, en.do("DELETE", "/v1/workers/"+reg.WorkerID, "", nil).status)
}

// TestClaimWaitOverflow: a wait_ms whose duration overflows is refused
// like any wait above the maximum, not accepted as a wrapped-around value.
func TestClaimWaitOverflow(t *testing.T) {
	t.Parallel()
	en := newEnv(t, backends()["sqlite"](t), server.Options{MaxPoll: 2 * time.Second})
	w := en.worker(t, "py.enrich")
	tests := []struct {
		name   string
		waitMS any
		status int
	}{
		{"max poll", 2000, 200},
		{"above max poll", 2001, 400},
		{"overflows to negative", int64(1) << 62, 400},
		{"overflows to small", int64(18446744073709), 400},
		{"max int64", int64(9223372036854775807), 400},
		{"negative", -1, 400},
	}
	for _, tt := range tests {
		r := w.post("/claim", map[string]any{"handlers": []string{"py.enrich"}, "wait_ms": tt.waitMS})
		require.Equal(t, tt.status, r.status, "%s: %s", tt.name, r.body)
		if tt.status == 400 {
			_, field := r.errorCode(t)
			require.Equal(t, "wait_ms", field, tt.name)
		}
	}
}
