package storetest

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// Identity: an id that users see (a task's, a step's, an audit entry's, a
// webhook's) is never handed out twice, whatever was deleted.

var idTests = []struct {
	name string
	fn   func(t *testing.T, h *harness)
}{
	{"TaskIDsNeverReused", testTaskIDsNeverReused},
	{"WebhookIDsNeverReused", testWebhookIDsNeverReused},
}

// deletions are the ways tasks are deleted, as the engine calls the store:
// `weft delete` and `weft prune` log each task, archived or not;
// retention deletes without a log.
var deletions = []struct {
	name   string
	params func(ids []int64) store.DeleteParams
}{
	{"delete", func(ids []int64) store.DeleteParams {
		return store.DeleteParams{IDs: ids, Actor: "op", Reason: "delete", Log: true}
	}},
	{"prune", func(ids []int64) store.DeleteParams {
		return store.DeleteParams{IDs: ids, Actor: "op", Reason: "prune", Log: true}
	}},
	{"delete archived", func(ids []int64) store.DeleteParams {
		return store.DeleteParams{IDs: ids, Actor: "op", Log: true, Archive: func([]store.ArchivedTask) error { return nil }}
	}},
	{"retention", func(ids []int64) store.DeleteParams { return store.DeleteParams{IDs: ids, Actor: "maintenance"} }},
}

// issued is the largest of each kind of id a store handed out.
type issued struct{ task, step, audit int64 }

func (h *harness) noteIDs(max *issued, id int64) {
	h.t.Helper()
	task := h.task(id)
	max.task = maxInt64(max.task, task.ID)
	for _, s := range task.Steps {
		max.step = maxInt64(max.step, s.ID)
	}
	audit, err := h.s.Audit(h.ctx, id)
	require.NoError(h.t, err)
	for _, e := range audit {
		max.audit = maxInt64(max.audit, e.ID)
	}
}

func maxInt64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

func testTaskIDsNeverReused(t *testing.T, h *harness) {
	var max issued
	for _, del := range deletions {
		// Three finished tasks (one with a signal kept and a tag); the
		// two newest are deleted, so the newest ids no longer exist.
		var ids []int64
		for i := 0; i < 3; i++ {
			id := h.insert(store.TaskInsert{Tags: map[string]string{"env": "test"}, Steps: []store.StepInsert{
				{Name: "a", Handler: "h", MaxAttempts: 1},
				{Name: "gate", Kind: store.KindSignal, Signal: "go", MaxAttempts: 1, Deps: []int{0}},
			}})[0].Task.ID
			_, err := h.s.Signal(h.ctx, id, "go", json.RawMessage(`1`), "op")
			require.NoError(t, err)
			_, err = h.s.CancelTask(h.ctx, id, "op", "")
			require.NoError(t, err)
			h.noteIDs(&max, id)
			ids = append(ids, id)
		}
		res, err := h.s.DeleteTasks(h.ctx, del.params(ids[1:]))
		require.NoError(t, err, del.name)
		require.ElementsMatch(t, ids[1:], res.Done, del.name)

		id := h.insert(store.TaskInsert{Steps: chain("x", "y")})[0].Task.ID
		task := h.task(id)
		require.Greater(t, task.ID, max.task, "%s: a new task's id is above every task id ever issued", del.name)
		for _, s := range task.Steps {
			require.Greater(t, s.ID, max.step, "%s: a new step's id is above every step id ever issued", del.name)
		}
		audit, err := h.s.Audit(h.ctx, id)
		require.NoError(t, err)
		require.NotEmpty(t, audit)
		for _, e := range audit {
			require.Greater(t, e.ID, max.audit, "%s: a new audit entry's id is above every one ever issued", del.name)
		}
		c := h.claimWith(store.ClaimParams{EngineID: "e1", Limit: 1, TaskID: id})
		require.Len(t, c, 1)
		h.ok(c[0], `{}`)
		_, err = h.s.CancelTask(h.ctx, id, "op", "")
		require.NoError(t, err)
		h.noteIDs(&max, id)
		require.Equal(t, state.TaskCancelled, h.task(id).State)
		// The new task is the newest: the next round deletes it too.
		res, err = h.s.DeleteTasks(h.ctx, del.params([]int64{id}))
		require.NoError(t, err)
		require.Equal(t, []int64{id}, res.Done)
	}
}

func testWebhookIDsNeverReused(t *testing.T, h *harness) {
	var newest int64
	for i := 0; i < 3; i++ {
		w, err := h.s.CreateWebhook(h.ctx, store.Webhook{URL: "http://hooks.example/x", Secret: "s"})
		require.NoError(t, err)
		require.Greater(t, w.ID, newest, "a new webhook's id is above every webhook id ever issued")
		newest = w.ID
		require.NoError(t, h.s.DeleteWebhook(h.ctx, w.ID))
	}
}
