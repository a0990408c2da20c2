package server_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/client"
	"github.com/weftrun/weft/server"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/wire"
)

// TestTagsAndBulkActions: tags go in with a submission and filter lists and
// bulk actions, through the API and the Go client.
func TestTagsAndBulkActions(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		en := newEnv(t, open(t), server.Options{})
		en.register("namespace: demo\nname: parked\nversion: \"1\"\nsteps:\n  - name: s\n    handler: nobody.serves.this\n")
		en.register("namespace: demo\nname: fails\nversion: \"1\"\nsteps:\n  - name: s\n    handler: go.fail\n    retry: { max_attempts: 1 }\n")
		c, err := client.New(en.url, en.admin)
		require.NoError(t, err)
		ctx := t.Context()
		var ids []int64
		for _, env := range []string{"staging", "staging", "prod"} {
			res, err := c.Submit(ctx, wire.SubmitRequest{Workflow: "demo/parked", Tags: map[string]string{"env": env, "team": "pay"}})
			require.NoError(t, err)
			require.Equal(t, env, res.Task.Tags["env"])
			ids = append(ids, res.Task.ID)
		}
		// Invalid tags are refused with the field named.
		r := en.do("POST", "/v1/tasks", en.admin, map[string]any{"workflow": "demo/parked", "tags": map[string]string{"bad key": "x"}})
		require.Equal(t, 400, r.status, "%s", r.body)
		code, field := r.errorCode(t)
		require.Equal(t, server.CodeInvalidField, code)
		require.Equal(t, "tags", field)
		r = en.do("GET", "/v1/tasks?tag=nokey", en.admin, nil)
		require.Equal(t, 400, r.status, "%s", r.body)
		// The engine checks a bulk filter: its errors name the field.
		for _, bad := range []struct {
			path, field string
			filter      map[string]any
		}{
			{"/v1/tasks/cancel", "filter.tags", map[string]any{"tags": map[string]string{"bad key": "x"}}},
			{"/v1/tasks/cancel", "filter.state", map[string]any{"state": "nope"}},
			{"/v1/tasks/retry", "filter.state", map[string]any{"state": "running"}},
			{"/v1/tasks/delete", "filter.workflow", map[string]any{"workflow": "a/b/c"}},
		} {
			r = en.do("POST", bad.path, en.admin, map[string]any{"filter": bad.filter})
			require.Equal(t, 400, r.status, "%s", r.body)
			code, field := r.errorCode(t)
			require.Equal(t, server.CodeInvalidField, code, "%s", r.body)
			require.Equal(t, bad.field, field, "%s", r.body)
		}

		staging, err := c.List(ctx, store.TaskFilter{Tags: map[string]string{"env": "staging", "team": "pay"}})
		require.NoError(t, err)
		require.Len(t, staging, 2)
		require.Equal(t, ids[1], staging[0].ID)

		// An empty filter is refused; a dry run counts; the action acts.
		r = en.do("POST", "/v1/tasks/cancel", en.admin, map[string]any{"filter": map[string]any{}})
		require.Equal(t, 400, r.status, "%s", r.body)
		// A schedule's name alone selects: its tasks, here none.
		r = en.do("POST", "/v1/tasks/cancel", en.admin, map[string]any{"filter": map[string]any{"schedule": "nightly"}})
		require.Equal(t, 200, r.status, "%s", r.body)
		require.JSONEq(t, `{"matched": 0, "done": 0, "skipped": 0, "complete": true, "remaining": 0}`, string(r.body))
		req := wire.BulkRequest{Filter: wire.TaskFilter{Workflow: "demo/parked", Tags: map[string]string{"env": "staging"}}, DryRun: true}
		res, err := c.CancelTasks(ctx, req)
		require.NoError(t, err)
		require.Equal(t, wire.BulkResult{Matched: 2, DryRun: true, Complete: true}, res)
		req.DryRun, req.Reason = false, "staging reset"
		res, err = c.CancelTasks(ctx, req)
		require.NoError(t, err)
		require.Equal(t, 2, res.Done)
		rows := en.auditOf(t, ids[0], string(state.TaskCancelled))
		require.Len(t, rows, 1)
		require.Equal(t, "staging reset", rows[0].Reason)
		require.Contains(t, rows[0].EngineID, "api:")
		prod, err := c.Get(ctx, ids[2])
		require.NoError(t, err)
		require.Equal(t, state.TaskPending, prod.State)

		// Retry the failed ones.
		failed, err := c.Submit(ctx, wire.SubmitRequest{Workflow: "demo/fails"})
		require.NoError(t, err)
		require.Equal(t, state.TaskFailed, en.waitTask(failed.Task.ID).State)
		// It needs attention, with the reason.
		var page wire.TaskList
		en.ok(200, "GET", "/v1/tasks?attention=true", nil, &page)
		require.Len(t, page.Tasks, 1)
		require.Contains(t, page.Tasks[0].Attention[0], "step s failed")
		res, err = c.RetryTasks(ctx, wire.BulkRequest{Filter: wire.TaskFilter{Attention: true}})
		require.NoError(t, err)
		require.Equal(t, 1, res.Done)

		// Delete needs tasks:delete; unfinished states are refused
		// unless forced.
		r = en.do("POST", "/v1/tasks/delete", en.key(server.PermTasksCancel), map[string]any{"filter": map[string]any{"state": "cancelled"}})
		require.Equal(t, 403, r.status, "%s", r.body)
		_, err = c.DeleteTasks(ctx, wire.BulkRequest{Filter: wire.TaskFilter{State: "pending"}})
		require.ErrorIs(t, err, store.ErrInvalid)
		res, err = c.DeleteTasks(ctx, wire.BulkRequest{Filter: wire.TaskFilter{State: "cancelled"}, Reason: "cleanup"})
		require.NoError(t, err)
		require.Equal(t, 2, res.Done)
		_, err = c.Get(ctx, ids[0])
		require.ErrorIs(t, err, store.ErrNotFound)
		res, err = c.DeleteTasks(ctx, wire.BulkRequest{Filter: wire.TaskFilter{Tags: map[string]string{"env": "prod"}}, Force: true})
		require.NoError(t, err)
		require.Equal(t, 1, res.Done)

		// Prune: nothing finished a day ago.
		pr, err := c.Prune(ctx, wire.PruneRequest{State: "failed", OlderThan: "1d", DryRun: true})
		require.NoError(t, err)
		require.Equal(t, 0, pr.Matched)
		r = en.do("POST", "/v1/tasks/prune", en.admin, map[string]any{"state": "running", "older_than": "1d"})
		require.Equal(t, 400, r.status)

		// An empty filter selects nothing unless all says every task: the
		// error names the API's field.
		for _, route := range []string{"/v1/tasks/cancel", "/v1/tasks/retry", "/v1/tasks/delete"} {
			r = en.do("POST", route, en.admin, map[string]any{})
			require.Equal(t, 400, r.status, "%s: %s", route, r.body)
			code, field := r.errorCode(t)
			require.Equal(t, "invalid_field", code, route)
			require.Equal(t, "all", field, route)
		}
	})
}

// TestBulkActionsByID: a bulk action names its tasks by id instead of a
// filter: cancel, then delete, the tasks named and no other; a delete by
// id leaves an unfinished task (skipped) unless forced; a request that
// gives ids and a filter, too many ids or no task id is refused, naming
// the field.
func TestBulkActionsByID(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		en := newEnv(t, open(t), server.Options{})
		en.register("namespace: demo\nname: parked\nversion: \"1\"\nsteps:\n  - name: s\n    handler: nobody.serves.this\n")
		c, err := client.New(en.url, en.admin)
		require.NoError(t, err)
		ctx := t.Context()
		var ids []int64
		for range 3 {
			res, err := c.Submit(ctx, wire.SubmitRequest{Workflow: "demo/parked"})
			require.NoError(t, err)
			ids = append(ids, res.Task.ID)
		}
		res, err := c.CancelTasks(ctx, wire.BulkRequest{IDs: ids[:2], DryRun: true})
		require.NoError(t, err)
		require.Equal(t, wire.BulkResult{Matched: 2, DryRun: true, Complete: true}, res)
		res, err = c.CancelTasks(ctx, wire.BulkRequest{IDs: ids[:2], Reason: "by id"})
		require.NoError(t, err)
		require.Equal(t, wire.BulkResult{Matched: 2, Done: 2, Complete: true}, res)
		rows := en.auditOf(t, ids[1], string(state.TaskCancelled))
		require.Len(t, rows, 1)
		require.Equal(t, "by id", rows[0].Reason)

		r := en.do("POST", "/v1/tasks/delete", en.key(server.PermTasksCancel), map[string]any{"ids": ids[:1]})
		require.Equal(t, 403, r.status, "%s", r.body)
		res, err = c.DeleteTasks(ctx, wire.BulkRequest{IDs: []int64{ids[0], ids[2]}})
		require.NoError(t, err)
		require.Equal(t, wire.BulkResult{Matched: 2, Done: 1, Skipped: 1, Complete: true}, res, "the pending task is left")
		_, err = c.Get(ctx, ids[0])
		require.ErrorIs(t, err, store.ErrNotFound)
		task, err := c.Get(ctx, ids[1])
		require.NoError(t, err, "a task not named stays")
		require.Equal(t, state.TaskCancelled, task.State)
		res, err = c.DeleteTasks(ctx, wire.BulkRequest{IDs: ids[2:], Force: true})
		require.NoError(t, err)
		require.Equal(t, 1, res.Done)
		_, err = c.Get(ctx, ids[2])
		require.ErrorIs(t, err, store.ErrNotFound)

		tooMany := make([]int64, wire.MaxBulkIDs+1)
		for i := range tooMany {
			tooMany[i] = int64(i + 1)
		}
		for _, tt := range []struct {
			name  string
			body  map[string]any
			field string
		}{
			{"ids and a filter", map[string]any{"ids": []int64{ids[1]}, "filter": map[string]any{"state": "cancelled"}}, "ids"},
			{"ids and all", map[string]any{"ids": []int64{ids[1]}, "all": true}, "ids"},
			{"not a task id", map[string]any{"ids": []int64{ids[1], 0}}, "ids[1]"},
			{"too many", map[string]any{"ids": tooMany}, "ids"},
		} {
			r := en.do("POST", "/v1/tasks/delete", en.admin, tt.body)
			require.Equal(t, 400, r.status, "%s: %s", tt.name, r.body)
			code, field := r.errorCode(t)
			require.Equal(t, server.CodeInvalidField, code, tt.name)
			require.Equal(t, tt.field, field, tt.name)
		}
		task, err = c.Get(ctx, ids[1])
		require.NoError(t, err, "refused requests delete nothing")
		require.Equal(t, state.TaskCancelled, task.State)
	})
}

// TestRetentionAndWorkers: namespace retention is set and listed through
// the API; the workers list shows the engine and a remote worker with
// their handlers.
func TestRetentionAndWorkers(t *testing.T) {
	t.Parallel()
	en := newEnv(t, backends()["sqlite"](t), server.Options{})
	en.register("namespace: shop\nname: add\nversion: \"1\"\nsteps:\n  - name: s\n    handler: go.add\n")
	c, err := client.New(en.url, en.admin)
	require.NoError(t, err)
	ctx := t.Context()
	rl, err := c.SetRetention(ctx, "shop", map[string]string{"completed": "7d", "failed": "12h"})
	require.NoError(t, err)
	require.Len(t, rl.Retention, 2)
	require.Equal(t, wire.Duration(7*24*time.Hour), rl.Retention[0].Keep)
	r := en.do("PUT", "/v1/retention/shop", en.admin, map[string]any{"keep": map[string]string{"running": "1d"}})
	require.Equal(t, 400, r.status)
	// A retention that would keep nothing is refused, not stored as 0s.
	r = en.do("PUT", "/v1/retention/shop", en.admin, map[string]any{"keep": map[string]string{"completed": "1ns"}})
	require.Equal(t, 400, r.status, "%s", r.body)
	_, field := r.errorCode(t)
	require.Equal(t, "keep.completed", field)
	require.Contains(t, string(r.body), "must be at least 1s, got 1ns")
	rl, err = c.SetRetention(ctx, "shop", map[string]string{"failed": ""})
	require.NoError(t, err)
	require.Len(t, rl.Retention, 1)
	rl, err = c.Retentions(ctx)
	require.NoError(t, err)
	require.Len(t, rl.Retention, 1)

	var reg wire.WorkerRegistered
	en.ok(201, "POST", "/v1/workers", wire.RegisterWorker{Name: "py", Handlers: []string{"py.resize"}}, &reg)
	ws, err := c.Workers(ctx)
	require.NoError(t, err)
	require.Len(t, ws, 2)
	kinds := map[string]wire.Worker{}
	for _, w := range ws {
		kinds[w.Kind] = w
	}
	require.Equal(t, []string{"py.resize"}, kinds["remote"].Handlers)
	require.Contains(t, kinds["engine"].Handlers, "go.fail")
	r = en.do("GET", "/v1/workers", en.key(server.PermTasksRead), nil)
	require.Equal(t, 403, r.status)
	log, err := c.OperatorLog(ctx, 1)
	require.NoError(t, err)
	require.Len(t, log, 1)
	require.Equal(t, "retention", log[0].Action)
	require.Equal(t, "namespace shop", log[0].Subject)
	require.Contains(t, log[0].Actor, "api:")
}
