package server_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/server"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/wire"
)

const chainTemplate = `namespace: api
name: chain
version: "1"
steps:
  - name: first
    handler: go.add
  - name: second
    handler: go.add
    depends_on: [first]
`

const failTemplate = `namespace: api
name: breaks
version: "1"
steps:
  - name: boom
    handler: go.fail
    retry: { max_attempts: 1 }
  - name: after
    handler: go.add
    depends_on: [boom]
`

func stepNamed(t *testing.T, task wire.Task, name string) wire.Step {
	t.Helper()
	for _, s := range task.Steps {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("task %d has no step %q", task.ID, name)
	return wire.Step{}
}

func TestWorkflowEndpoints(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		en := newEnv(t, open(t), server.Options{})
		var wf struct{ Ref, Namespace string }
		en.ok(201, "POST", "/v1/workflows", map[string]string{"template": chainTemplate}, &wf)
		require.Equal(t, "api/chain@1", wf.Ref)
		en.ok(200, "POST", "/v1/workflows", map[string]string{"template": chainTemplate}, nil)
		changed := strings.Replace(chainTemplate, "go.add\n    depends_on", "go.fail\n    depends_on", 1)
		r := en.do("POST", "/v1/workflows", en.admin, map[string]string{"template": changed})
		require.Equal(t, 409, r.status, "%s", r.body)

		var list struct{ Workflows []struct{ Ref string } }
		en.ok(200, "GET", "/v1/workflows", nil, &list)
		require.Len(t, list.Workflows, 1)
		en.ok(200, "GET", "/v1/workflows/api/chain/versions/1", nil, &wf)
		en.ok(200, "GET", "/v1/workflows/api/chain/versions/latest", nil, &wf)
		require.Equal(t, "api/chain@1", wf.Ref)
		r = en.do("GET", "/v1/workflows/api/chain/versions/9", en.admin, nil)
		require.Equal(t, 404, r.status)
		code, _ := r.errorCode(t)
		require.Equal(t, server.CodeNotFound, code)

		var v struct {
			Valid    bool
			Workflow string
			Problems []wire.Problem
		}
		en.ok(200, "POST", "/v1/workflows/validate", map[string]string{"template": chainTemplate}, &v)
		require.True(t, v.Valid)
		require.Equal(t, "api/chain@1", v.Workflow)
		bad := strings.Replace(chainTemplate, "depends_on: [first]", "depends_on: [nowhere]\n    colour: red", 1)
		en.ok(200, "POST", "/v1/workflows/validate", map[string]string{"template": bad, "filename": "bad.yaml"}, &v)
		require.False(t, v.Valid)
		require.Len(t, v.Problems, 2, "%+v", v.Problems)
		for _, p := range v.Problems {
			require.Positive(t, p.Line, "each problem has its line: %+v", p)
		}
		r = en.do("POST", "/v1/workflows", en.admin, map[string]string{"template": bad})
		require.Equal(t, 400, r.status)
		code, field := r.errorCode(t)
		require.Equal(t, server.CodeInvalidWorkflow, code)
		require.Equal(t, "template", field)
		var listAfter struct{ Workflows []any }
		en.ok(200, "GET", "/v1/workflows", nil, &listAfter)
		require.Len(t, listAfter.Workflows, 1, "an invalid template registers nothing")
	})
}

func TestTaskEndpoints(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		en := newEnv(t, open(t), server.Options{})
		en.register(chainTemplate)
		var task wire.Task
		en.ok(201, "POST", "/v1/tasks", map[string]any{"workflow": "api/chain", "input": map[string]int{"n": 2}, "idempotency_key": "k1"}, &task)
		var dup wire.Task
		en.ok(200, "POST", "/v1/tasks", map[string]any{"workflow": "api/chain", "input": map[string]int{"n": 2}, "idempotency_key": "k1"}, &dup)
		require.Equal(t, task.ID, dup.ID, "a duplicate returns the existing task")
		r := en.do("POST", "/v1/tasks", en.admin, map[string]any{"workflow": "api/nothing"})
		require.Equal(t, 404, r.status)

		done := en.waitTask(task.ID)
		require.Equal(t, state.TaskCompleted, done.State)
		require.JSONEq(t, `{"n":2}`, string(stepNamed(t, done, "first").Result))
		require.JSONEq(t, `{"n":4}`, string(stepNamed(t, done, "second").Result), "the result flowed from first to second")

		var st wire.Step
		en.ok(200, "GET", fmt.Sprintf("/v1/steps/%d", stepNamed(t, done, "second").ID), nil, &st)
		require.Equal(t, "second", st.Name)
		require.Equal(t, []string{"first"}, st.DependsOn)
		require.Equal(t, 404, en.do("GET", "/v1/steps/999999", en.admin, nil).status)
		require.Equal(t, 404, en.do("GET", "/v1/tasks/999999", en.admin, nil).status)
		r = en.do("GET", "/v1/tasks/abc", en.admin, nil)
		require.Equal(t, 400, r.status)
		_, field := r.errorCode(t)
		require.Equal(t, "id", field)

		var audit struct{ Audit []wire.AuditEntry }
		en.ok(200, "GET", fmt.Sprintf("/v1/tasks/%d/audit", task.ID), nil, &audit)
		require.NotEmpty(t, audit.Audit)
		require.Equal(t, "submitted", audit.Audit[0].Reason)
		require.Equal(t, 404, en.do("GET", "/v1/tasks/999999/audit", en.admin, nil).status)

		// Cancel a task delayed by an hour; cancelling again conflicts.
		var later wire.Task
		en.ok(201, "POST", "/v1/tasks", map[string]any{"workflow": "api/chain@1", "run_at": time.Now().Add(time.Hour)}, &later)
		en.ok(200, "POST", fmt.Sprintf("/v1/tasks/%d/cancel", later.ID), nil, &later)
		require.Equal(t, state.TaskCancelled, later.State)
		r = en.do("POST", fmt.Sprintf("/v1/tasks/%d/cancel", later.ID), en.admin, nil)
		require.Equal(t, 409, r.status)
		code, _ := r.errorCode(t)
		require.Equal(t, server.CodeConflict, code)
		require.Equal(t, 409, en.do("POST", fmt.Sprintf("/v1/tasks/%d/retry", task.ID), en.admin, nil).status, "a completed task is not retried")
		require.Equal(t, 404, en.do("POST", "/v1/tasks/999999/cancel", en.admin, nil).status)
	})
}

func TestListTasksFiltersAndPages(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		en := newEnv(t, open(t), server.Options{})
		en.register(chainTemplate)
		en.register(failTemplate)
		var ids []int64
		for i := range 5 {
			var task wire.Task
			en.ok(201, "POST", "/v1/tasks", map[string]any{"workflow": "api/chain", "input": map[string]int{"n": i}}, &task)
			ids = append(ids, task.ID)
		}
		var broken wire.Task
		en.ok(201, "POST", "/v1/tasks", map[string]any{"workflow": "api/breaks"}, &broken)
		en.waitTask(broken.ID)

		var page taskPage
		var seen []int64
		cursor := ""
		for range 10 {
			path := "/v1/tasks?workflow=chain&limit=2"
			if cursor != "" {
				path += "&cursor=" + cursor
			}
			page = taskPage{}
			en.ok(200, "GET", path, nil, &page)
			for _, t := range page.Tasks {
				seen = append(seen, t.ID)
			}
			if page.NextCursor == "" {
				break
			}
			cursor = page.NextCursor
		}
		require.Equal(t, []int64{ids[4], ids[3], ids[2], ids[1], ids[0]}, seen, "every chain task once, newest first")

		en.ok(200, "GET", "/v1/tasks?state=failed", nil, &page)
		require.Len(t, page.Tasks, 1)
		require.Equal(t, broken.ID, page.Tasks[0].ID)
		en.ok(200, "GET", "/v1/tasks?namespace=other", nil, &page)
		require.Empty(t, page.Tasks)
		future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
		en.ok(200, "GET", "/v1/tasks?created_after="+future, nil, &page)
		require.Empty(t, page.Tasks)
		en.ok(200, "GET", "/v1/tasks?created_before="+future, nil, &page)
		require.Len(t, page.Tasks, 6)

		for _, tt := range []struct{ query, field string }{
			{"state=bogus", "state"}, {"limit=0", "limit"}, {"limit=x", "limit"}, {"cursor=-3", "cursor"},
			{"created_after=yesterday", "created_after"}, {"colour=red", "colour"},
		} {
			r := en.do("GET", "/v1/tasks?"+tt.query, en.admin, nil)
			require.Equal(t, 400, r.status, tt.query)
			_, field := r.errorCode(t)
			require.Equal(t, tt.field, field, tt.query)
		}
	})
}

type taskPage struct {
	Tasks      []wire.Task `json:"tasks"`
	NextCursor string      `json:"next_cursor"`
}

func TestStepOperatorActions(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		en := newEnv(t, open(t), server.Options{})
		en.register(failTemplate)
		run := func() wire.Task {
			var task wire.Task
			en.ok(201, "POST", "/v1/tasks", map[string]any{"workflow": "api/breaks", "input": map[string]int{"n": 1}}, &task)
			task = en.waitTask(task.ID)
			require.Equal(t, state.TaskFailed, task.State)
			require.Equal(t, state.StepSkipped, stepNamed(t, task, "after").State)
			return task
		}

		// resolve: the failed step is resolved and its dependent runs.
		task := run()
		boom := stepNamed(t, task, "boom")
		var st wire.Step
		en.ok(200, "POST", fmt.Sprintf("/v1/steps/%d/resolve", boom.ID), map[string]string{"reason": "checked by hand"}, &st)
		require.Equal(t, state.StepResolved, st.State)
		task = en.waitTask(task.ID)
		require.Equal(t, state.TaskCompleted, task.State)
		require.Equal(t, 409, en.do("POST", fmt.Sprintf("/v1/steps/%d/resolve", boom.ID), en.admin, nil).status)

		// complete: the supplied result reaches the dependent.
		task = run()
		boom = stepNamed(t, task, "boom")
		en.ok(200, "POST", fmt.Sprintf("/v1/steps/%d/complete", boom.ID), map[string]any{"result": map[string]int{"n": 40}}, &st)
		require.JSONEq(t, `{"n":40}`, string(st.Result))
		task = en.waitTask(task.ID)
		require.Equal(t, state.TaskCompleted, task.State)
		require.JSONEq(t, `{"n":41}`, string(stepNamed(t, task, "after").Result))
		r := en.do("POST", fmt.Sprintf("/v1/steps/%d/complete", boom.ID), en.admin, map[string]any{})
		require.Equal(t, 400, r.status)
		_, field := r.errorCode(t)
		require.Equal(t, "result", field)

		// retry: the step runs again (and fails again: go.fail always does).
		task = run()
		boom = stepNamed(t, task, "boom")
		en.ok(200, "POST", fmt.Sprintf("/v1/steps/%d/retry", boom.ID), nil, &st)
		require.Contains(t, []state.Step{state.StepReady, state.StepRunning, state.StepFailed}, st.State)
		task = en.waitTask(task.ID)
		require.Equal(t, state.TaskFailed, task.State)
		require.Equal(t, 1, stepNamed(t, task, "boom").Attempts, "a retried step starts its attempts afresh")
		var trail struct{ Audit []wire.AuditEntry }
		en.ok(200, "GET", fmt.Sprintf("/v1/tasks/%d/audit", task.ID), nil, &trail)
		found := false
		for _, e := range trail.Audit {
			if e.Step == "boom" && e.Reason == "step retried by an operator" {
				found = true
				require.True(t, strings.HasPrefix(e.EngineID, "api:"), "the audit names who acted: %q", e.EngineID)
			}
		}
		require.True(t, found)
		require.Equal(t, 404, en.do("POST", "/v1/steps/999999/retry", en.admin, nil).status)
	})
}

func TestBadBodies(t *testing.T) {
	t.Parallel()
	en := newEnv(t, backends()["sqlite"](t), server.Options{MaxBodyBytes: 512})
	en.register(chainTemplate)
	tests := []struct {
		name, body  string
		status      int
		code, field string
	}{
		{"malformed", `{"workflow": `, 400, server.CodeInvalidJSON, ""},
		{"not JSON", `workflow=x`, 400, server.CodeInvalidJSON, ""},
		{"empty", ``, 400, server.CodeInvalidJSON, ""},
		{"array", `[1,2]`, 400, server.CodeInvalidJSON, ""},
		{"trailing data", `{"workflow":"api/chain"} {"x":1}`, 400, server.CodeInvalidJSON, ""},
		{"unknown field", `{"workflow":"api/chain","colour":"red"}`, 400, server.CodeUnknownField, "colour"},
		{"wrong type", `{"workflow":"api/chain","priority":"high"}`, 400, server.CodeInvalidField, "priority"},
		{"missing workflow", `{}`, 400, server.CodeInvalidField, "workflow"},
		{"bad reference", `{"workflow":"nochain"}`, 400, server.CodeInvalidField, "workflow"},
		{"priority out of range", `{"workflow":"api/chain","priority":99999999}`, 400, server.CodeInvalidField, "priority"},
		{"bad time", `{"workflow":"api/chain","run_at":"tomorrow"}`, 400, server.CodeInvalidField, "run_at"},
		{"too large", `{"workflow":"api/chain","input":"` + strings.Repeat("x", 600) + `"}`, 413, server.CodeBodyTooLarge, ""},
	}
	for _, tt := range tests {
		r := en.do("POST", "/v1/tasks", en.admin, tt.body)
		require.Equal(t, tt.status, r.status, "%s: %s", tt.name, r.body)
		code, field := r.errorCode(t)
		require.Equal(t, tt.code, code, tt.name)
		require.Equal(t, tt.field, field, tt.name)
	}
	var page taskPage
	en.ok(200, "GET", "/v1/tasks", nil, &page)
	require.Empty(t, page.Tasks, "no bad request created a task")

	r := en.do("GET", "/v1/nowhere", en.admin, nil)
	require.Equal(t, 404, r.status)
	code, _ := r.errorCode(t)
	require.Equal(t, server.CodeNotFound, code)
}

// TestBadValuesNameTheirPath: a value that does not decode into its field
// is refused naming the field by its whole path, with the array's index,
// on every route and at any depth, whatever the kind of the value's type
// (a time, an integer written as a string, an object).
func TestBadValuesNameTheirPath(t *testing.T) {
	t.Parallel()
	en := newEnv(t, backends()["sqlite"](t), server.Options{})
	en.register(chainTemplate)
	tests := []struct {
		route, body, code, field, says string
	}{
		{"/v1/tasks/batch", `{"tasks":[{"workflow":"api/chain"},{"workflow":"api/chain","priority":"high"}]}`, server.CodeInvalidField, "tasks[1].priority", "must be an integer, got string"},
		{"/v1/tasks/batch", `{"tasks":[{"workflow":"api/chain"},{"workflow":"api/chain","bogus":1}]}`, server.CodeUnknownField, "tasks[1].bogus", "unknown field"},
		{"/v1/tasks/batch", `{"tasks":[{"workflow":"api/chain","run_at":"x"}]}`, server.CodeInvalidField, "tasks[0].run_at", "RFC 3339"},
		{"/v1/tasks/batch", `{"tasks":[{"workflow":"api/chain","tags":["a"]}]}`, server.CodeInvalidField, "tasks[0].tags", "must be an object, got array"},
		{"/v1/tasks/batch", `{"tasks":{"workflow":"api/chain"}}`, server.CodeInvalidField, "tasks", "must be an array, got object"},
		{"/v1/tasks", `{"workflow":"api/chain","good_until":17}`, server.CodeInvalidField, "good_until", "RFC 3339"},
		{"/v1/tasks", `{"workflow":"api/chain","priority":1.5}`, server.CodeInvalidField, "priority", "must be an integer, a whole number in digits, got 1.5"},
		{"/v1/tasks", `{"workflow":"api/chain","priority":1e3}`, server.CodeInvalidField, "priority", "must be an integer, a whole number in digits, got 1e3"},
		{"/v1/tasks", `{"workflow":"api/chain","priority":99999999999999999999}`, server.CodeInvalidField, "priority", "must be an integer from"},
		{"/v1/tasks", `[]`, server.CodeInvalidJSON, "", "the body must be an object, got array"},
		{"/v1/tasks/cancel", `{"filter":{"created_after":"x"}}`, server.CodeInvalidField, "filter.created_after", "RFC 3339"},
		{"/v1/tasks/cancel", `{"ids":[1,"2"]}`, server.CodeInvalidField, "ids[1]", "must be an integer, got string"},
		{"/v1/workers/w/complete", `{"fence":{"step_id":1,"attempt":1,"lease_id":"abc"}}`, server.CodeInvalidField, "fence.lease_id", "must be a string holding an integer"},
		{"/v1/workers/w/complete", `{"fence":{"step_id":1,"attempt":1,"lease_id":7}}`, server.CodeInvalidField, "fence.lease_id", "must be a string holding an integer, got number"},
	}
	for _, tt := range tests {
		r := en.do("POST", tt.route, en.admin, tt.body)
		require.Equal(t, 400, r.status, "%s %s: %s", tt.route, tt.body, r.body)
		code, field := r.errorCode(t)
		require.Equal(t, tt.code, code, "%s %s: %s", tt.route, tt.body, r.body)
		require.Equal(t, tt.field, field, "%s %s: %s", tt.route, tt.body, r.body)
		require.Contains(t, string(r.body), tt.says, "%s %s", tt.route, tt.body)
	}
}

func TestBacklogRefusesWithRetryAfter(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		en := newEnv(t, open(t), server.Options{MaxBacklog: 3, RetryAfter: 7 * time.Second})
		en.register(chainTemplate)
		later := time.Now().Add(time.Hour) // delayed: they stay unfinished
		var accepted []int64
		for range 3 {
			var task wire.Task
			en.ok(201, "POST", "/v1/tasks", map[string]any{"workflow": "api/chain", "run_at": later}, &task)
			accepted = append(accepted, task.ID)
		}
		r := en.do("POST", "/v1/tasks", en.admin, map[string]any{"workflow": "api/chain"})
		require.Equal(t, http.StatusServiceUnavailable, r.status)
		require.Equal(t, "7", r.header.Get("Retry-After"))
		code, _ := r.errorCode(t)
		require.Equal(t, server.CodeOverloaded, code)
		var page taskPage
		en.ok(200, "GET", "/v1/tasks", nil, &page)
		require.Len(t, page.Tasks, 3, "the refused task was not created, the accepted ones are kept")
		en.ok(200, "POST", fmt.Sprintf("/v1/tasks/%d/cancel", accepted[0]), nil, nil)
		en.ok(201, "POST", "/v1/tasks", map[string]any{"workflow": "api/chain", "run_at": later}, nil)
	})
}

func TestHealth(t *testing.T) {
	t.Parallel()
	en := newEnv(t, backends()["sqlite"](t), server.Options{})
	en.ok(200, "GET", "/health/live", nil, nil)
	var ready struct {
		Status string
		Checks map[string]string
	}
	r := en.do("GET", "/health/ready", "", nil)
	require.Equal(t, 200, r.status)
	r.json(t, &ready)
	require.Equal(t, "ok", ready.Checks["database"])
	require.NoError(t, en.e.Stop(t.Context()))
	r = en.do("GET", "/health/ready", "", nil)
	require.Equal(t, 503, r.status, "a stopped engine is not ready")
	r.json(t, &ready)
	require.Equal(t, "not running", ready.Checks["engine"])
}

// TestUnknownRoutes: a path the API does not have is 404 not_found; a
// path it has, asked with another method, is 405 method_not_allowed with
// Allow listing the methods it takes.
func TestUnknownRoutes(t *testing.T) {
	t.Parallel()
	en := newEnv(t, backends()["sqlite"](t), server.Options{})
	r := en.do("GET", "/v1/nope", en.admin, nil)
	require.Equal(t, 404, r.status)
	code, _ := r.errorCode(t)
	require.Equal(t, server.CodeNotFound, code)

	r = en.do("PUT", "/v1/tasks", en.admin, nil)
	require.Equal(t, 405, r.status, "%s", r.body)
	code, _ = r.errorCode(t)
	require.Equal(t, server.CodeMethodNotAllowed, code)
	require.ElementsMatch(t, []string{"POST", "GET"}, strings.Split(r.header.Get("Allow"), ", "))
	r = en.do("DELETE", "/v1/tasks/7", en.admin, nil)
	require.Equal(t, 405, r.status)
	require.Equal(t, "GET", r.header.Get("Allow"))
}
