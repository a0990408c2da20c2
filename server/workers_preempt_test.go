package server_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/weftrun/weft"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/server"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/wire"
)

const crunchTemplate = `namespace: demo
name: crunch
version: "1"
steps:
  - name: crunch
    handler: py.crunch
    priority: -1
    preemptible: true
`

const pageTemplate = `namespace: demo
name: page
version: "1"
steps:
  - name: alert
    handler: py.alert
    priority: 5
`

type heartbeatReply struct {
	Lost    []map[string]any `json:"lost"`
	Preempt []struct {
		Fence  map[string]any `json:"fence"`
		Reason string         `json:"reason"`
	} `json:"preempt"`
}

func (w *worker) heartbeat(t *testing.T, body map[string]any) heartbeatReply {
	t.Helper()
	r := w.post("/heartbeat", body)
	require.Equal(t, 200, r.status, "%s", r.body)
	var out heartbeatReply
	r.json(t, &out)
	return out
}

// TestRemoteWorkerPreemption: a full remote worker holds a low-priority
// preemptible step when a step of higher priority it would claim becomes
// ready. Its heartbeat's reply asks it to stop that step (a worker that does
// not say it is full is not asked); reported preempted, the step returns to
// ready with its attempt given back and its checkpoint kept, the audit
// names the preemptor, and the freed slot claims the urgent step first.
func TestRemoteWorkerPreemption(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		// Six workers hold steps while the test talks to one at a time: a
		// lease of a second could lapse between two heartbeats of one.
		en := newEnvWith(t, open(t), server.Options{MaxPoll: 20 * time.Second}, func(c *weft.Config) { c.LeaseTTL = 30 * time.Second })
		en.register(crunchTemplate)
		en.register(pageTemplate)
		handlers := []string{"py.crunch", "py.alert"}
		claimWith := func(w *worker) []claimed {
			r := w.post("/claim", map[string]any{"handlers": handlers, "namespaces": []string{"demo"}, "max": 1, "wait_ms": 5000})
			require.Equal(t, 200, r.status, "%s", r.body)
			var out struct{ Steps []claimed }
			r.json(t, &out)
			return out.Steps
		}
		// holding registers a worker that holds a crunch step of its own.
		holding := func() (*worker, claimed) {
			w := en.worker(t, handlers...)
			en.ok(201, "POST", "/v1/tasks", map[string]any{"workflow": "demo/crunch"}, &wire.Task{})
			steps := claimWith(w)
			require.Len(t, steps, 1)
			require.Equal(t, "crunch", steps[0].Step)
			return w, steps[0]
		}

		var low, high wire.Task
		en.ok(201, "POST", "/v1/tasks", map[string]any{"workflow": "demo/crunch"}, &low)
		w := en.worker(t, handlers...)
		claim := func() []claimed { return claimWith(w) }
		steps := claim()
		require.Len(t, steps, 1)
		c := steps[0]
		require.Equal(t, "crunch", c.Step)
		require.Equal(t, 204, w.post("/checkpoint", map[string]any{"fence": c.Fence, "checkpoint": map[string]int{"row": 40}}).status)

		// Not told: a worker that does not say, one with a free slot, one
		// whose predicates do not reach the urgent step. Each is its own
		// worker, so that each heartbeat is its worker's first (the peek is
		// rated per worker).
		notTold := []struct {
			name string
			beat map[string]any
		}{
			{"does not say", map[string]any{"handlers": handlers}},
			{"a free slot", map[string]any{"free": 1, "handlers": handlers}},
			{"another namespace", map[string]any{"free": 0, "handlers": handlers, "namespaces": []string{"other"}}},
			{"without handlers: those of its preemptible steps", map[string]any{"free": 0}},
		}
		others := make([]*worker, len(notTold))
		fences := make([]map[string]any, len(notTold))
		for i := range notTold {
			var oc claimed
			others[i], oc = holding()
			fences[i] = oc.Fence
		}
		en.ok(201, "POST", "/v1/tasks", map[string]any{"workflow": "demo/page"}, &high)
		for i, tt := range notTold {
			tt.beat["steps"] = []any{fences[i]}
			require.Empty(t, others[i].heartbeat(t, tt.beat).Preempt, tt.name)
		}

		// Full: told.
		held := []any{c.Fence}
		var reply heartbeatReply
		deadline := time.Now().Add(10 * time.Second)
		for len(reply.Preempt) == 0 && time.Now().Before(deadline) {
			reply = w.heartbeat(t, map[string]any{"steps": held, "free": 0, "handlers": handlers, "namespaces": []string{"demo"}})
		}
		require.Len(t, reply.Preempt, 1)
		reason := fmt.Sprintf("preempted by task %d step %q (priority 5)", high.ID, "alert")
		require.Equal(t, reason, reply.Preempt[0].Reason)
		require.Equal(t, c.Fence, reply.Preempt[0].Fence)
		r := en.do("GET", "/metrics", "", nil)
		require.Equal(t, 200, r.status)
		require.Equal(t, 1.0, metricValue(t, string(r.body), "weft_steps_preempted_total", `workflow="crunch"`, `step="crunch"`))
		// One in flight: asked again, nothing new.
		again := w.heartbeat(t, map[string]any{"steps": held, "free": 0})
		require.Len(t, again.Preempt, 1)
		require.Equal(t, c.Fence, again.Preempt[0].Fence)

		r = w.post("/fail", map[string]any{"fence": c.Fence, "error": reply.Preempt[0].Reason, "preempted": true, "permanent": true})
		require.Equal(t, 400, r.status, "%s", r.body)
		r = w.post("/fail", map[string]any{"fence": c.Fence, "error": reply.Preempt[0].Reason, "preempted": true})
		require.Equal(t, 200, r.status, "%s", r.body)
		require.Contains(t, string(r.body), `"state":"ready"`)
		var got wire.Task
		en.ok(200, "GET", fmt.Sprintf("/v1/tasks/%d", low.ID), nil, &got)
		crunch := stepNamed(t, got, "crunch")
		require.Equal(t, state.StepReady, crunch.State)
		require.Equal(t, 0, crunch.Attempts, "the preempted attempt was given back")
		require.JSONEq(t, `{"row":40}`, string(crunch.Checkpoint))
		require.Empty(t, w.heartbeat(t, map[string]any{"steps": []any{}, "free": 1}).Preempt)

		// The urgent step is claimed first; the preempted one runs again
		// under the same attempt number, from its checkpoint.
		first := claim()
		require.Len(t, first, 1)
		require.Equal(t, "alert", first[0].Step)
		r = w.post("/fail", map[string]any{"fence": first[0].Fence, "error": "not mine", "preempted": true})
		require.Equal(t, 400, r.status, "a step that is not preemptible: %s", r.body)
		_, field := r.errorCode(t)
		require.Equal(t, "preempted", field)
		require.Equal(t, 200, w.post("/complete", map[string]any{"fence": first[0].Fence, "result": 1}).status)
		second := claim()
		require.Len(t, second, 1)
		require.Equal(t, "crunch", second[0].Step)
		require.Equal(t, 1, second[0].Attempt)
		require.JSONEq(t, `{"row":40}`, string(second[0].Checkpoint), "the rerun starts from the checkpoint")
		require.Equal(t, 200, w.post("/complete", map[string]any{"fence": second[0].Fence, "result": 2}).status)
		require.Equal(t, state.TaskCompleted, en.waitTask(low.ID).State)

		audit, err := en.e.Audit(t.Context(), low.ID)
		require.NoError(t, err)
		found := false
		for _, a := range audit {
			if a.Step == "crunch" && a.From == "running" && a.To == "ready" {
				found = true
				require.Equal(t, reason, a.Reason)
				require.Equal(t, 1, a.Attempt)
			}
		}
		require.True(t, found, "the audit records the preemption: %+v", audit)
	})
}
