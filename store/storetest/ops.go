package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// Operations: tags, filters, bulk actions, deletion with its archive,
// retention, the operator log, the attention list and the workers list.

var opsTests = []struct {
	name string
	fn   func(t *testing.T, h *harness)
}{
	{"TagsStoredAndFiltered", testOpsTags},
	{"TagsRefused", testOpsTagsRefused},
	{"FilterCountAndMatch", testOpsFilterCountMatch},
	{"CancelTasksInBatch", testOpsCancelTasks},
	{"RetryTasksInBatch", testOpsRetryTasks},
	{"DeleteTasksWithEverything", testOpsDeleteTasks},
	{"DeleteArchiveFailureKeepsTasks", testOpsDeleteArchiveFails},
	{"FinishedTasksByAge", testOpsFinishedTasks},
	{"RetentionAndOperatorLog", testOpsRetention},
	{"AttentionList", testOpsAttention},
	{"WorkersAdvertiseHandlers", testOpsWorkersHandlers},
}

// opsFail claims the ready step of a one-step task and fails it for good.
func (h *harness) opsFail(engine string, task int64) store.ClaimedStep {
	h.t.Helper()
	c := h.claimWith(store.ClaimParams{EngineID: engine, Limit: 1, TaskID: task})
	require.Len(h.t, c, 1)
	require.NoError(h.t, h.complete(store.Outcome{Fence: c[0].Fence, EngineID: engine, State: state.StepFailed, Error: "boom"})[0])
	return c[0]
}

func testOpsTags(t *testing.T, h *harness) {
	a := h.insert(store.TaskInsert{Tags: map[string]string{"env": "staging", "team": "pay"}})[0].Task
	b := h.insert(store.TaskInsert{Tags: map[string]string{"env": "prod", "team": "pay"}})[0].Task
	c := h.insert(store.TaskInsert{})[0].Task
	require.Equal(t, map[string]string{"env": "staging", "team": "pay"}, a.Tags, "the insert result carries the tags")
	require.Equal(t, map[string]string{"env": "prod", "team": "pay"}, h.task(b.ID).Tags)
	require.Nil(t, h.task(c.ID).Tags)
	ids := func(f store.TaskFilter) []int64 {
		tasks, err := h.s.ListTasks(h.ctx, f)
		require.NoError(t, err)
		out := []int64{}
		for _, task := range tasks {
			out = append(out, task.ID)
		}
		return out
	}
	require.Equal(t, []int64{b.ID, a.ID}, ids(store.TaskFilter{Tags: map[string]string{"team": "pay"}}))
	require.Equal(t, []int64{a.ID}, ids(store.TaskFilter{Tags: map[string]string{"team": "pay", "env": "staging"}}), "tags combine with AND")
	require.Empty(t, ids(store.TaskFilter{Tags: map[string]string{"team": "pay", "env": "dev"}}))
	require.Empty(t, ids(store.TaskFilter{Tags: map[string]string{"env": "pay"}}), "a value matches under its own key only")
	// With the other filters and the cursor.
	require.Equal(t, []int64{a.ID}, ids(store.TaskFilter{Tags: map[string]string{"team": "pay"}, BeforeID: b.ID}))
	require.Equal(t, []int64{b.ID}, ids(store.TaskFilter{Tags: map[string]string{"team": "pay"}, Limit: 1}))
	require.Empty(t, ids(store.TaskFilter{Tags: map[string]string{"team": "pay"}, Namespace: "other"}))
	tasks, err := h.s.ListTasks(h.ctx, store.TaskFilter{Tags: map[string]string{"env": "prod"}})
	require.NoError(t, err)
	require.Len(t, tasks, 1)
	require.Equal(t, b.Tags, tasks[0].Tags, "lists carry the tags")
	// A duplicate by idempotency key returns the first task's tags.
	first := h.insert(store.TaskInsert{IdempotencyKey: "k", Tags: map[string]string{"v": "1"}})[0]
	dup := h.insert(store.TaskInsert{IdempotencyKey: "k", Tags: map[string]string{"v": "2"}})[0]
	require.True(t, dup.Duplicate)
	require.Equal(t, first.Task.Tags, dup.Task.Tags)
}

func testOpsTagsRefused(t *testing.T, h *harness) {
	long := make([]byte, store.MaxTagValueLen+1)
	for i := range long {
		long[i] = 'x'
	}
	many := map[string]string{}
	for i := 0; i <= store.MaxTags; i++ {
		many[fmt.Sprintf("k%d", i)] = "v"
	}
	for _, tags := range []map[string]string{
		{"": "v"}, {"-x": "v"}, {"a b": "v"}, {"k": ""}, {"k": "a\nb"}, {"k": string(long)}, many,
	} {
		_, err := h.s.InsertTasks(h.ctx, []store.TaskInsert{{Namespace: "ns", Workflow: "wf", Version: "1", Steps: chain("a"), Tags: tags}})
		require.ErrorIs(t, err, store.ErrInvalid, "%v", tags)
	}
	tasks, err := h.s.ListTasks(h.ctx, store.TaskFilter{})
	require.NoError(t, err)
	require.Empty(t, tasks, "nothing was inserted")
}

func testOpsFilterCountMatch(t *testing.T, h *harness) {
	for i := 0; i < 7; i++ {
		env := "staging"
		if i%2 == 1 {
			env = "prod"
		}
		h.insert(store.TaskInsert{Tags: map[string]string{"env": env}})
	}
	h.insert(store.TaskInsert{Namespace: "other", Tags: map[string]string{"env": "staging"}})
	staging := store.TaskFilter{Namespace: "ns", Tags: map[string]string{"env": "staging"}}
	n, err := h.s.CountTasks(h.ctx, staging)
	require.NoError(t, err)
	require.Equal(t, 4, n)
	// Batches walk the selection newest first, each after the last.
	var all []int64
	f := staging
	for {
		ids, err := h.s.MatchTasks(h.ctx, f, 3)
		require.NoError(t, err)
		if len(ids) == 0 {
			break
		}
		all = append(all, ids...)
		f.BeforeID = ids[len(ids)-1]
	}
	require.Len(t, all, 4)
	for i := 1; i < len(all); i++ {
		require.Less(t, all[i], all[i-1])
	}
	n, err = h.s.CountTasks(h.ctx, store.TaskFilter{States: []state.Task{state.TaskCompleted, state.TaskFailed}})
	require.NoError(t, err)
	require.Zero(t, n)
	n, err = h.s.CountTasks(h.ctx, store.TaskFilter{})
	require.NoError(t, err)
	require.Equal(t, 8, n)
}

func testOpsCancelTasks(t *testing.T, h *harness) {
	h.register("e1")
	res := h.insert(store.TaskInsert{}, store.TaskInsert{}, store.TaskInsert{})
	running := h.claim("e1", 1)
	require.Len(t, running, 1)
	done := h.insert(store.TaskInsert{})[0].Task.ID
	h.ok(h.claimWith(store.ClaimParams{EngineID: "e1", Limit: 1, TaskID: done})[0], `{}`)
	ids := []int64{res[0].Task.ID, res[1].Task.ID, res[2].Task.ID, done, 999999}
	out, err := h.s.CancelTasks(h.ctx, ids, "cli:alice", "drain staging")
	require.NoError(t, err)
	require.ElementsMatch(t, ids[:3], out.Done)
	require.Equal(t, 2, out.Skipped, "the completed task and the unknown id")
	require.Equal(t, []store.Fence{running[0].Fence}, out.Running)
	for _, id := range ids[:3] {
		require.Equal(t, state.TaskCancelled, h.task(id).State)
		trail, err := h.s.Audit(h.ctx, id)
		require.NoError(t, err)
		var n int
		for _, e := range trail {
			if e.Step == "" && e.To == string(state.TaskCancelled) {
				require.Equal(t, "cli:alice", e.EngineID)
				require.Equal(t, "drain staging", e.Reason)
				n++
			}
		}
		require.Equal(t, 1, n, "one audit entry per task")
	}
	require.Equal(t, state.TaskCompleted, h.task(done).State)
	// A rerun finds nothing left to do.
	again, err := h.s.CancelTasks(h.ctx, ids[:3], "cli:alice", "drain staging")
	require.NoError(t, err)
	require.Empty(t, again.Done)
	require.Equal(t, 3, again.Skipped)
}

func testOpsRetryTasks(t *testing.T, h *harness) {
	h.register("e1")
	a := h.insert(store.TaskInsert{})[0].Task.ID
	h.opsFail("e1", a)
	b := h.insert(store.TaskInsert{})[0].Task.ID
	h.opsFail("e1", b)
	pending := h.insert(store.TaskInsert{})[0].Task.ID
	out, err := h.s.RetryTasks(h.ctx, []int64{a, b, pending}, "api:ops", "provider back")
	require.NoError(t, err)
	require.ElementsMatch(t, []int64{a, b}, out.Done)
	require.Equal(t, 1, out.Skipped)
	for _, id := range []int64{a, b} {
		task := h.task(id)
		require.Equal(t, state.TaskRunning, task.State)
		require.Equal(t, state.StepReady, task.Steps[0].State)
		trail, err := h.s.Audit(h.ctx, id)
		require.NoError(t, err)
		last := trail[len(trail)-1]
		require.Equal(t, "api:ops", last.EngineID)
	}
	require.Len(t, h.claim("e1", 10), 3, "the retried steps and the pending task's step are ready")
}

func testOpsDeleteTasks(t *testing.T, h *harness) {
	h.register("e1")
	done := h.insert(store.TaskInsert{Tags: map[string]string{"env": "x"},
		Steps: []store.StepInsert{{Name: "a", Handler: "h", MaxAttempts: 1}, {Name: "wait", Kind: store.KindSignal, Signal: "go", Deps: []int{0}}}})[0].Task.ID
	h.ok(h.claim("e1", 1)[0], `{"r":1}`)
	h.beginWait(done, "wait")
	_, err := h.s.Signal(h.ctx, done, "go", json.RawMessage(`{"ok":true}`), "e1")
	require.NoError(t, err)
	require.Equal(t, state.TaskCompleted, h.task(done).State)
	_, err = h.s.Signal(h.ctx, done, "late", json.RawMessage(`1`), "e1")
	require.Error(t, err, "an ended task takes no signal")
	kept := h.insert(store.TaskInsert{Tags: map[string]string{"env": "x"}})[0].Task.ID
	var archived []store.ArchivedTask
	out, err := h.s.DeleteTasks(h.ctx, store.DeleteParams{IDs: []int64{done, kept, 999999}, Actor: "cli:alice", Reason: "cleanup", Log: true,
		Archive: func(a []store.ArchivedTask) error { archived = append(archived, a...); return nil }})
	require.NoError(t, err)
	require.Equal(t, []int64{done}, out.Done)
	require.Equal(t, 2, out.Skipped, "the unfinished task and the unknown id")
	require.Len(t, archived, 1)
	require.Equal(t, done, archived[0].Task.ID)
	require.Len(t, archived[0].Task.Steps, 2)
	require.JSONEq(t, `{"r":1}`, string(archived[0].Task.Steps[0].Result))
	require.NotEmpty(t, archived[0].Audit)
	require.Equal(t, map[string]string{"env": "x"}, archived[0].Task.Tags)
	_, err = h.s.GetTask(h.ctx, done)
	require.ErrorIs(t, err, store.ErrNotFound)
	trail, err := h.s.Audit(h.ctx, done)
	require.NoError(t, err)
	require.Empty(t, trail)
	n, err := h.s.CountTasks(h.ctx, store.TaskFilter{Tags: map[string]string{"env": "x"}})
	require.NoError(t, err)
	require.Equal(t, 1, n, "the deleted task's tags are gone")
	require.Equal(t, state.TaskPending, h.task(kept).State)
	log, err := h.s.OperatorLog(h.ctx, 10)
	require.NoError(t, err)
	require.Len(t, log, 1)
	require.Equal(t, store.OperatorEntry{ID: log[0].ID, At: log[0].At, Actor: "cli:alice", Action: "delete", Subject: fmt.Sprintf("task %d", done), Reason: "cleanup"}, log[0])
}

func testOpsDeleteArchiveFails(t *testing.T, h *harness) {
	h.register("e1")
	id := h.insert(store.TaskInsert{})[0].Task.ID
	h.opsFail("e1", id)
	_, err := h.s.DeleteTasks(h.ctx, store.DeleteParams{IDs: []int64{id}, Archive: func([]store.ArchivedTask) error { return errors.New("disk full") }})
	require.ErrorContains(t, err, "disk full")
	require.Equal(t, state.TaskFailed, h.task(id).State, "a failed archive deletes nothing")
}

func testOpsFinishedTasks(t *testing.T, h *harness) {
	h.register("e1")
	old := h.insert(store.TaskInsert{})[0].Task.ID
	h.opsFail("e1", old)
	h.clock.Advance(time.Hour)
	other := h.insert(store.TaskInsert{Workflow: "special", Version: "1"})[0].Task.ID
	h.opsFail("e1", other)
	recent := h.insert(store.TaskInsert{})[0].Task.ID
	h.clock.Advance(time.Hour)
	h.opsFail("e1", recent)
	h.insert(store.TaskInsert{}) // unfinished
	q := store.FinishedQuery{State: state.TaskFailed, FinishedBefore: h.clock.Now().Add(-30 * time.Minute)}
	ids, err := h.s.FinishedTasks(h.ctx, q)
	require.NoError(t, err)
	require.Equal(t, []int64{old, other}, ids, "oldest finished first; the recent one is kept")
	q.ExceptWorkflows, q.Namespace = []string{"special"}, "ns"
	ids, err = h.s.FinishedTasks(h.ctx, q)
	require.NoError(t, err)
	require.Equal(t, []int64{old}, ids)
	q = store.FinishedQuery{State: state.TaskFailed, FinishedBefore: h.clock.Now().Add(time.Second), Workflow: "wf", Limit: 1}
	ids, err = h.s.FinishedTasks(h.ctx, q)
	require.NoError(t, err)
	require.Equal(t, []int64{old}, ids)
	ids, err = h.s.FinishedTasks(h.ctx, store.FinishedQuery{State: state.TaskCompleted, FinishedBefore: h.clock.Now().Add(time.Hour)})
	require.NoError(t, err)
	require.Empty(t, ids)
	_ = recent
}

func testOpsRetention(t *testing.T, h *harness) {
	require.NoError(t, h.s.SetRetention(h.ctx, store.Retention{Namespace: "shop", State: state.TaskCompleted, Keep: 7 * 24 * time.Hour, UpdatedBy: "cli:alice"}))
	require.NoError(t, h.s.SetRetention(h.ctx, store.Retention{Namespace: "shop", State: state.TaskFailed, Keep: time.Hour, UpdatedBy: "cli:alice"}))
	require.NoError(t, h.s.SetRetention(h.ctx, store.Retention{Namespace: "shop", State: state.TaskFailed, Keep: 2 * time.Hour, UpdatedBy: "api:bob"}))
	rs, err := h.s.Retentions(h.ctx)
	require.NoError(t, err)
	require.Len(t, rs, 2)
	require.Equal(t, state.TaskCompleted, rs[0].State)
	require.Equal(t, 7*24*time.Hour, rs[0].Keep)
	require.Equal(t, 2*time.Hour, rs[1].Keep, "setting again replaces")
	require.Equal(t, "api:bob", rs[1].UpdatedBy)
	require.NoError(t, h.s.SetRetention(h.ctx, store.Retention{Namespace: "shop", State: state.TaskCompleted, UpdatedBy: "cli:alice"}))
	rs, err = h.s.Retentions(h.ctx)
	require.NoError(t, err)
	require.Len(t, rs, 1, "Keep 0 clears")
	log, err := h.s.OperatorLog(h.ctx, 2)
	require.NoError(t, err)
	require.Len(t, log, 2, "limit")
	require.Equal(t, "retention", log[0].Action)
	require.Equal(t, "namespace shop", log[0].Subject)
	require.Equal(t, "cleared retention of completed tasks", log[0].Reason)
	require.Equal(t, "api:bob", log[1].Actor)
}

func testOpsAttention(t *testing.T, h *harness) {
	require.NoError(t, h.s.RegisterEngine(h.ctx, store.EngineInfo{ID: "e1", Host: "test-host", PID: 1, StartedAt: h.clock.Now(), Handlers: []string{"h"}}))
	failed := h.insert(store.TaskInsert{})[0].Task.ID
	h.opsFail("e1", failed)
	orphan := h.insert(store.TaskInsert{Steps: []store.StepInsert{{Name: "charge", Handler: "nobody", MaxAttempts: 1}}})[0].Task.ID
	served := h.insert(store.TaskInsert{})[0].Task.ID
	waiting := h.insert(store.TaskInsert{Steps: []store.StepInsert{{Name: "approve", Kind: store.KindSignal, Signal: "ok", SignalTimeout: time.Minute}}})[0].Task.ID
	h.beginWait(waiting, "approve")
	cancelled := h.insert(store.TaskInsert{})[0].Task.ID
	_, err := h.s.CancelTasks(h.ctx, []int64{cancelled}, "x", "")
	require.NoError(t, err)
	list := func(stale time.Duration) map[int64][]string {
		tasks, err := h.s.ListTasks(h.ctx, store.TaskFilter{Attention: true, StaleAfter: stale})
		require.NoError(t, err)
		out := map[int64][]string{}
		for _, task := range tasks {
			out[task.ID] = task.Attention
		}
		return out
	}
	got := list(time.Minute)
	require.Len(t, got, 1, "%v", got)
	require.Len(t, got[failed], 1)
	require.Contains(t, got[failed][0], "step only failed: boom")
	// Later, the orphan's step has waited past the threshold and the
	// signal wait past its deadline (maintenance has not failed it yet).
	h.clock.Advance(2 * time.Minute)
	got = list(time.Minute)
	require.Len(t, got, 3, "%v", got)
	require.Contains(t, got[orphan][0], "no live engine or worker serves handler nobody")
	require.Contains(t, got[waiting][0], "waits for signal ok past its deadline")
	require.NotContains(t, got, served, "its handler is served")
	n, err := h.s.CountTasks(h.ctx, store.TaskFilter{Attention: true, StaleAfter: time.Minute})
	require.NoError(t, err)
	require.Equal(t, 3, n)
	require.Len(t, list(time.Hour), 2, "a longer threshold")
	// A worker that serves the handler takes the orphan off the list; a
	// stopped one does not count.
	require.NoError(t, h.s.RegisterEngine(h.ctx, store.EngineInfo{ID: "w1", Host: "remote worker w", StartedAt: h.clock.Now(), Worker: true, Handlers: []string{"nobody"}}))
	require.NotContains(t, list(time.Minute), orphan)
	require.NoError(t, h.s.StopEngine(h.ctx, "w1"))
	require.Contains(t, list(time.Minute), orphan)
}

func testOpsWorkersHandlers(t *testing.T, h *harness) {
	require.NoError(t, h.s.RegisterEngine(h.ctx, store.EngineInfo{ID: "e1", Host: "test-host", PID: 1, StartedAt: h.clock.Now(), Handlers: []string{"h", "exec", "h"}}))
	require.NoError(t, h.s.RegisterEngine(h.ctx, store.EngineInfo{ID: "w1", Host: "remote worker py", StartedAt: h.clock.Now(), Worker: true, Owner: "api_key:1"}))
	require.NoError(t, h.s.SetHandlers(h.ctx, "w1", []string{"py.resize"}))
	h.insert(store.TaskInsert{}, store.TaskInsert{})
	require.Len(t, h.claim("e1", 2), 2)
	ws, err := h.s.ListWorkers(h.ctx)
	require.NoError(t, err)
	require.Len(t, ws, 2)
	byID := map[string]store.EngineInfo{}
	for _, w := range ws {
		byID[w.ID] = w
	}
	require.Equal(t, []string{"exec", "h"}, byID["e1"].Handlers)
	require.Equal(t, 2, byID["e1"].Held)
	require.False(t, byID["e1"].Worker)
	require.Equal(t, []string{"py.resize"}, byID["w1"].Handlers)
	require.Zero(t, byID["w1"].Held)
	require.True(t, byID["w1"].Worker)
	require.NoError(t, h.s.StopEngine(h.ctx, "w1"))
	ws, err = h.s.ListWorkers(h.ctx)
	require.NoError(t, err)
	require.Len(t, ws, 1, "stopped workers are not listed")
}
