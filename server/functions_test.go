package server_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/server"
	"github.com/weftrun/weft/wire"
)

const functionTemplate = `namespace: demo
name: fn
version: "1"
steps:
  - name: function
    type: function
    handler: py.fn
`

// TestWorkerDurableFunction: a remote worker's durable function through
// the REST protocol: its function step reports calls, which become steps
// the worker claims with the journal; each bad call is refused with its
// field, and nothing of a refused report is recorded.
func TestWorkerDurableFunction(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		en := newEnv(t, open(t), server.Options{})
		en.register(functionTemplate)
		en.register("namespace: demo\nname: plain\nversion: \"1\"\nsteps:\n  - name: s\n    handler: py.plain\n")
		var sub wire.SubmitResponse
		en.ok(201, "POST", "/v1/tasks", map[string]any{"workflow": "demo/fn", "input": map[string]int{"n": 1}}, &sub)
		w := en.worker(t, "py.fn")
		claim := func() []wire.ClaimedStep {
			r := w.post("/claim", map[string]any{"handlers": []string{"py.fn"}, "max": 5, "wait_ms": 2000})
			require.Equal(t, 200, r.status, "%s", r.body)
			var out wire.ClaimResponse
			r.json(t, &out)
			return out.Steps
		}
		steps := claim()
		require.Len(t, steps, 1)
		fn := steps[0]
		require.Equal(t, "function", fn.Kind)
		require.Empty(t, fn.Calls)

		bad := []struct {
			call  map[string]any
			field string
		}{
			{map[string]any{"name": "a b", "kind": "step"}, "calls[0].name"},
			{map[string]any{"name": "a[1]", "kind": "step"}, "calls[0].name"},
			{map[string]any{"name": "a", "kind": "dance"}, "calls[0].kind"},
			{map[string]any{"name": "a", "kind": "sleep"}, "calls[0].sleep_ms"},
			{map[string]any{"name": "a", "kind": "signal", "signal": "no way"}, "calls[0].signal"},
			{map[string]any{"name": "a", "kind": "child", "workflow": "nons"}, "calls[0].workflow"},
			{map[string]any{"name": "a", "kind": "step", "max_attempts": 1001}, "calls[0].max_attempts"},
			{map[string]any{"name": "a", "kind": "step", "bogus": 1}, ""},
		}
		for _, b := range bad {
			r := w.post("/calls", map[string]any{"fence": fn.Fence, "calls": []any{b.call}})
			require.Equal(t, 400, r.status, "%v: %s", b.call, r.body)
			if b.field != "" {
				_, field := r.errorCode(t)
				require.Equal(t, b.field, field, "%v: %s", b.call, r.body)
			}
		}
		dup := w.post("/calls", map[string]any{"fence": fn.Fence, "calls": []any{
			map[string]any{"name": "charge", "kind": "step"}, map[string]any{"name": "charge", "kind": "step"}}})
		require.Equal(t, 400, dup.status, "%s", dup.body)

		r := w.post("/calls", map[string]any{"fence": fn.Fence, "calls": []any{
			map[string]any{"name": "charge", "kind": "step", "max_attempts": 2},
			map[string]any{"name": "nap", "kind": "sleep", "sleep_ms": 1}}})
		require.Equal(t, 200, r.status, "%s", r.body)
		var rep wire.Reported
		r.json(t, &rep)
		require.Equal(t, "waiting", rep.State)
		again := w.post("/calls", map[string]any{"fence": fn.Fence, "calls": []any{map[string]any{"name": "x", "kind": "step"}}})
		require.Equal(t, 409, again.status, "a report on a step no longer held: %s", again.body)

		// The call is a step of kind call, with the journal; the sleep
		// ends on the server without reaching the worker.
		steps = claim()
		require.Len(t, steps, 1)
		call := steps[0]
		require.Equal(t, "call", call.Kind)
		require.Equal(t, "charge", call.Step)
		require.Equal(t, []wire.RecordedCall{{Name: "charge", Kind: "step"}, {Name: "nap", Kind: "sleep"}}, call.Calls)
		r = w.post("/complete", map[string]any{"fence": call.Fence, "result": "ch_1"})
		require.Equal(t, 200, r.status, "%s", r.body)

		steps = claim()
		require.Len(t, steps, 1)
		fn = steps[0]
		require.Equal(t, "function", fn.Kind)
		require.Equal(t, 1, fn.Attempt, "waiting for calls gives the attempt back")
		require.Equal(t, []wire.RecordedCall{{Name: "charge", Kind: "step", Ended: true, OK: true, Result: []byte(`"ch_1"`)},
			{Name: "nap", Kind: "sleep", Ended: true, OK: true}}, fn.Calls)
		r = w.post("/complete", map[string]any{"fence": fn.Fence, "result": map[string]string{"done": "ch_1"}})
		require.Equal(t, 200, r.status, "%s", r.body)
		task := en.waitTask(sub.ID)
		require.Equal(t, "completed", string(task.State))
		require.Len(t, task.Steps, 3)

		// A step that is not a function's takes no calls.
		en.ok(201, "POST", "/v1/tasks", map[string]any{"workflow": "demo/plain"}, nil)
		plain := en.worker(t, "py.plain")
		r = plain.post("/claim", map[string]any{"handlers": []string{"py.plain"}, "max": 1, "wait_ms": 2000})
		var out wire.ClaimResponse
		r.json(t, &out)
		require.Len(t, out.Steps, 1)
		r = plain.post("/calls", map[string]any{"fence": out.Steps[0].Fence, "calls": []any{map[string]any{"name": "x", "kind": "step"}}})
		require.Equal(t, 400, r.status, "%s", r.body)
		_, field := r.errorCode(t)
		require.Equal(t, "calls", field)
	})
}
