package server_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/server"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/wire"
)

// auditOf returns the task-level audit rows of a task that moved to state.
func (en *env) auditOf(t *testing.T, id int64, to string) []wire.AuditEntry {
	t.Helper()
	var trail wire.AuditList
	en.ok(200, "GET", "/v1/tasks/"+itoa(id)+"/audit", nil, &trail)
	var out []wire.AuditEntry
	for _, e := range trail.Audit {
		if e.Step == "" && e.To == to {
			out = append(out, e)
		}
	}
	return out
}

// TestTaskActionReason: cancel and retry take an optional {"reason"} and
// record it in the audit trail with the acting key.
func TestTaskActionReason(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		en := newEnv(t, open(t), server.Options{})
		en.register("namespace: demo\nname: parked\nversion: \"1\"\nsteps:\n  - name: s\n    handler: nobody.serves.this\n")
		en.register("namespace: demo\nname: fails\nversion: \"1\"\nsteps:\n  - name: s\n    handler: go.fail\n    retry: { max_attempts: 1 }\n")
		token, k, err := server.NewAPIKey("oncall", []string{server.PermTasksCancel, server.PermTasksRetry})
		require.NoError(t, err)
		require.NoError(t, en.st.CreateAPIKey(t.Context(), k))

		var parked, failing wire.Task
		en.ok(201, "POST", "/v1/tasks", map[string]any{"workflow": "demo/parked"}, &parked)
		r := en.do("POST", "/v1/tasks/"+itoa(parked.ID)+"/cancel", token, map[string]string{"reason": "customer asked"})
		require.Equal(t, 200, r.status, "%s", r.body)
		rows := en.auditOf(t, parked.ID, string(state.TaskCancelled))
		require.Len(t, rows, 1)
		require.Equal(t, "api:oncall", rows[0].EngineID)
		require.Equal(t, "customer asked", rows[0].Reason)

		en.ok(201, "POST", "/v1/tasks", map[string]any{"workflow": "demo/fails"}, &failing)
		require.Equal(t, state.TaskFailed, en.waitTask(failing.ID).State)
		r = en.do("POST", "/v1/tasks/"+itoa(failing.ID)+"/retry", token, map[string]string{"reason": "dependency fixed"})
		require.Equal(t, 200, r.status, "%s", r.body)
		rows = en.auditOf(t, failing.ID, string(state.TaskRunning))
		require.NotEmpty(t, rows)
		last := rows[len(rows)-1]
		require.Equal(t, "api:oncall", last.EngineID)
		require.Equal(t, "dependency fixed", last.Reason)

		// Without a body, as before.
		require.Equal(t, state.TaskFailed, en.waitTask(failing.ID).State)
		r = en.do("POST", "/v1/tasks/"+itoa(failing.ID)+"/retry", token, nil)
		require.Equal(t, 200, r.status, "%s", r.body)
		rows = en.auditOf(t, failing.ID, string(state.TaskRunning))
		require.Equal(t, "api:oncall", rows[len(rows)-1].EngineID)

		// A body with anything else is refused, and nothing happens.
		r = en.do("POST", "/v1/tasks/"+itoa(failing.ID)+"/cancel", token, map[string]string{"why": "x"})
		require.Equal(t, 400, r.status, "%s", r.body)
		code, field := r.errorCode(t)
		require.Equal(t, server.CodeUnknownField, code)
		require.Equal(t, "why", field)
		r = en.do("POST", "/v1/tasks/"+itoa(failing.ID)+"/cancel", token, map[string]string{"reason": strings.Repeat("x", 5000)})
		require.Equal(t, 400, r.status, "%s", r.body)
	})
}

// TestBodyTooLargeEveryRoute: a body over --max-body is 413
// body_too_large on every route, also on those that read no body.
func TestBodyTooLargeEveryRoute(t *testing.T) {
	t.Parallel()
	en := newEnv(t, backends()["sqlite"](t), server.Options{MaxBodyBytes: 1024})
	big := `{"reason": "` + strings.Repeat("x", 2048) + `"}`
	tests := []struct{ method, path string }{
		{"POST", "/v1/tasks/1/cancel"},
		{"POST", "/v1/tasks/1/retry"},
		{"POST", "/v1/steps/1/retry"},
		{"GET", "/v1/tasks"},
		{"GET", "/v1/tasks/1"},
		{"DELETE", "/v1/workers/remote-x"},
		{"POST", "/v1/tasks"},
		{"GET", "/health/live"},
	}
	for _, tt := range tests {
		r := en.do(tt.method, tt.path, en.admin, big)
		require.Equal(t, 413, r.status, "%s %s: %s", tt.method, tt.path, r.body)
		code, _ := r.errorCode(t)
		require.Equal(t, server.CodeBodyTooLarge, code, "%s %s", tt.method, tt.path)
	}
}
