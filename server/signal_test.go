package server_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/client"
	"github.com/weftrun/weft/server"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/wire"
)

const gateTemplate = `namespace: demo
name: gate
version: "1"
steps:
  - name: approval
    type: signal
    signal: {name: go_live}
`

// TestSignalRoute: POST /v1/tasks/{id}/signals/{name} delivers a signal
// with its payload, keeps one sent before the wait, records the acting key,
// and answers the errors a caller can make.
func TestSignalRoute(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		en := newEnv(t, open(t), server.Options{})
		en.register(gateTemplate)
		signaller := en.key(server.PermTasksSignal)
		reader := en.key(server.PermTasksRead)

		var task wire.Task
		en.ok(201, "POST", "/v1/tasks", map[string]any{"workflow": "demo/gate"}, &task)
		path := "/v1/tasks/" + itoa(task.ID) + "/signals/go_live"

		tests := []struct {
			name, path, token string
			body              any
			status            int
			code              string
		}{
			{"no permission", path, reader, nil, 403, "forbidden"},
			{"bad name", "/v1/tasks/" + itoa(task.ID) + "/signals/no%20spaces", signaller, nil, 400, "invalid_field"},
			{"long name", "/v1/tasks/" + itoa(task.ID) + "/signals/" + strings.Repeat("g", 129), signaller, nil, 400, "invalid_field"},
			{"unknown task", "/v1/tasks/999999/signals/go_live", signaller, nil, 404, "not_found"},
			{"no step waits for it", "/v1/tasks/" + itoa(task.ID) + "/signals/go_lvie", signaller, nil, 409, "conflict"},
			{"unknown field", path, signaller, `{"payload": 1, "extra": 2}`, 400, "unknown_field"},
			{"bad json", path, signaller, `{"payload": `, 400, "invalid_json"},
		}
		for _, tc := range tests {
			r := en.do("POST", tc.path, tc.token, tc.body)
			require.Equal(t, tc.status, r.status, "%s: %s", tc.name, r.body)
			code, field := r.errorCode(t)
			require.Equal(t, tc.code, code, tc.name)
			if code == "invalid_field" {
				require.Equal(t, "name", field, tc.name)
			}
		}

		// Through the Go client, once the engine began the step's wait: the
		// signal completes it, as the signalling key, and the payload
		// reaches the step's result.
		en.waitStep(task.ID, 0, state.StepWaiting)
		c, err := client.New(en.url, signaller)
		require.NoError(t, err)
		_, err = c.Signal(t.Context(), task.ID, "go_live", json.RawMessage(`{"approved_by":"ops"}`))
		require.NoError(t, err)
		done := en.waitTask(task.ID)
		require.Equal(t, state.TaskCompleted, done.State)
		require.JSONEq(t, `{"signal":"go_live","payload":{"approved_by":"ops"}}`, string(done.Steps[0].Result))

		var trail wire.AuditList
		en.ok(200, "GET", "/v1/tasks/"+itoa(task.ID)+"/audit", nil, &trail)
		var byKey bool
		for _, e := range trail.Audit {
			byKey = byKey || (e.Step == "approval" && e.EngineID == "api:test-tasks:signal")
		}
		require.True(t, byKey, "the signalling key is in the audit trail: %+v", trail.Audit)

		// A finished task takes no more signals.
		_, err = c.Signal(t.Context(), task.ID, "go_live", nil)
		require.ErrorIs(t, err, store.ErrConflict)

		// The raw route without a body delivers null.
		var second wire.Task
		en.ok(201, "POST", "/v1/tasks", map[string]any{"workflow": "demo/gate"}, &second)
		var res wire.SignalResult
		en.ok(200, "POST", "/v1/tasks/"+itoa(second.ID)+"/signals/go_live", nil, &res)
		require.JSONEq(t, `{"signal":"go_live","payload":null}`, string(en.waitTask(second.ID).Steps[0].Result))
	})
}

// TestRetriedSignalStepWaitsAgain: a signal step whose wait timed out and
// that an operator retries, through each REST route that retries, waits
// for its signal again, and the signal then completes the task.
func TestRetriedSignalStepWaitsAgain(t *testing.T) {
	t.Parallel()
	routes := []struct {
		name  string
		retry func(en *env, task wire.Task) (string, any)
	}{
		{"step", func(en *env, task wire.Task) (string, any) {
			return "/v1/steps/" + itoa(task.Steps[0].ID) + "/retry", nil
		}},
		{"task", func(en *env, task wire.Task) (string, any) { return "/v1/tasks/" + itoa(task.ID) + "/retry", nil }},
		{"bulk", func(en *env, task wire.Task) (string, any) {
			return "/v1/tasks/retry", map[string]any{"ids": []int64{task.ID}}
		}},
	}
	eachBackend(t, func(t *testing.T, open storeFactory) {
		en := newEnv(t, open(t), server.Options{})
		en.register(`namespace: demo
name: timed_gate
version: "1"
steps:
  - name: approval
    type: signal
    signal: {name: go_live, timeout: 1h}
`)
		for _, rt := range routes {
			var task wire.Task
			en.ok(201, "POST", "/v1/tasks", map[string]any{"workflow": "demo/timed_gate"}, &task)
			// The engine begins the wait, which times out: maintenance an
			// hour and a minute later.
			task = en.waitStep(task.ID, 0, state.StepWaiting)
			require.Equal(t, state.TaskRunning, task.State)
			_, err := en.st.Promote(t.Context(), time.Now().Add(61*time.Minute), "test")
			require.NoError(t, err)
			task = en.waitTask(task.ID)
			require.Equal(t, state.TaskFailed, task.State, rt.name)

			path, body := rt.retry(en, task)
			en.ok(200, "POST", path, body, nil)
			en.ok(200, "GET", "/v1/tasks/"+itoa(task.ID), nil, &task)
			require.Equal(t, state.StepWaiting, task.Steps[0].State, "%s: the step waits for its signal again", rt.name)
			var res wire.SignalResult
			en.ok(200, "POST", "/v1/tasks/"+itoa(task.ID)+"/signals/go_live", map[string]any{"payload": rt.name}, &res)
			require.True(t, res.Delivered, "%s: the signal reaches the waiting step", rt.name)
			done := en.waitTask(task.ID)
			require.Equal(t, state.TaskCompleted, done.State, rt.name)
		}
	})
}
