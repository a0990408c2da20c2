package storetest

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// Operator reads and actions: cancel, retry, registered workflows, lists
// and the audit trail.

func testCancel(t *testing.T, h *harness) {
	id := h.insert(store.TaskInsert{Steps: []store.StepInsert{{Name: "a", Handler: "h", MaxAttempts: 1}, {Name: "b", Handler: "h", MaxAttempts: 1},
		{Name: "c", Handler: "h", MaxAttempts: 1, Deps: []int{0}}}})[0].Task.ID
	got := h.claim("e1", 1)
	require.Len(t, got, 1)
	running, err := h.s.CancelTask(h.ctx, id, "cli:alice", "stop")
	require.NoError(t, err)
	require.Equal(t, []store.Fence{got[0].Fence}, running)
	trail, err := h.s.Audit(h.ctx, id)
	require.NoError(t, err)
	var recorded bool
	for _, e := range trail {
		if e.Step == "" && e.To == string(state.TaskCancelled) {
			require.Equal(t, "cli:alice", e.EngineID, "the actor is recorded")
			require.Equal(t, "stop", e.Reason)
			recorded = true
		}
	}
	require.True(t, recorded, "%+v", trail)
	task := h.task(id)
	require.Equal(t, state.TaskCancelled, task.State)
	for _, s := range task.Steps {
		require.Equal(t, state.StepCancelled, s.State, s.Name)
	}
	require.ErrorIs(t, h.complete(store.Outcome{Fence: got[0].Fence, State: state.StepCompleted})[0], store.ErrStaleLease)
	_, err = h.s.CancelTask(h.ctx, id, "", "again")
	require.ErrorIs(t, err, store.ErrConflict)
	_, err = h.s.CancelTask(h.ctx, 424242, "", "missing")
	require.ErrorIs(t, err, store.ErrNotFound)
	require.Empty(t, h.claim("e1", 10))
}

func testRetryTask(t *testing.T, h *harness) {
	id := h.insert(store.TaskInsert{Steps: chain("a", "b", "c")})[0].Task.ID
	a := h.claim("e1", 1)[0]
	h.ok(a, `{"a":1}`)
	b := h.claim("e1", 1)[0]
	require.NoError(t, h.complete(store.Outcome{Fence: b.Fence, State: state.StepFailed, Error: "bad"})[0])
	require.Equal(t, state.TaskFailed, h.task(id).State)
	require.ErrorIs(t, h.s.RetryTask(h.ctx, 424242, "", ""), store.ErrNotFound)
	require.NoError(t, h.s.RetryTask(h.ctx, id, "api:ops", "input fixed"))
	task := h.task(id)
	require.Equal(t, state.TaskRunning, task.State)
	trail, err := h.s.Audit(h.ctx, id)
	require.NoError(t, err)
	var taskRow, stepRow bool
	for _, e := range trail {
		switch {
		case e.Step == "" && e.To == string(state.TaskRunning) && e.From == string(state.TaskFailed):
			require.Equal(t, "api:ops", e.EngineID, "the actor is recorded")
			require.Equal(t, "input fixed", e.Reason)
			taskRow = true
		case e.Step == "b" && e.To == string(state.StepReady) && e.From == string(state.StepFailed):
			require.Equal(t, "api:ops", e.EngineID)
			require.Equal(t, "task retried: input fixed", e.Reason)
			stepRow = true
		}
	}
	require.True(t, taskRow && stepRow, "%+v", trail)
	require.Empty(t, task.Error)
	require.Equal(t, map[string]state.Step{"a": state.StepCompleted, "b": state.StepReady, "c": state.StepPending}, states(task))
	b2 := h.claim("e1", 1)[0]
	require.Equal(t, "b", b2.Name)
	require.Equal(t, 1, b2.Attempts, "a retried task gets fresh attempts")
	require.JSONEq(t, `{"a":1}`, string(b2.Deps["a"]))
	h.ok(b2, `{}`)
	h.ok(h.claim("e1", 1)[0], `{}`)
	require.Equal(t, state.TaskCompleted, h.task(id).State)
	require.ErrorIs(t, h.s.RetryTask(h.ctx, id, "", ""), store.ErrConflict)
}

func testWorkflows(t *testing.T, h *harness) {
	def := func(v string) store.WorkflowRecord {
		return store.WorkflowRecord{Namespace: "ns", Name: "wf", Version: v, Definition: json.RawMessage(fmt.Sprintf(`{"version":%q}`, v))}
	}
	put := func(w store.WorkflowRecord) (store.WorkflowRecord, bool, error) { return h.s.PutWorkflow(h.ctx, w) }
	for _, v := range []string{"1.9", "1.10", "1.2"} {
		stored, created, err := put(def(v))
		require.NoError(t, err)
		require.True(t, created, "a new version is created")
		require.False(t, stored.CreatedAt.IsZero())
	}
	first, err := h.s.GetWorkflow(h.ctx, "ns", "wf", "1.9")
	require.NoError(t, err)
	stored, created, err := put(def("1.9"))
	require.NoError(t, err, "the identical definition again is fine")
	require.False(t, created, "and creates nothing")
	require.True(t, first.CreatedAt.Equal(stored.CreatedAt), "it returns the version as first stored")
	changed := def("1.9")
	changed.Definition = json.RawMessage(`{"version":"1.9","steps":[]}`)
	_, _, err = put(changed)
	require.ErrorIs(t, err, store.ErrConflict)
	latest, err := h.s.GetWorkflow(h.ctx, "ns", "wf", "")
	require.NoError(t, err)
	require.Equal(t, "1.10", latest.Version)
	one, err := h.s.GetWorkflow(h.ctx, "ns", "wf", "1.2")
	require.NoError(t, err)
	require.JSONEq(t, `{"version":"1.2"}`, string(one.Definition))
	_, err = h.s.GetWorkflow(h.ctx, "ns", "nope", "")
	require.ErrorIs(t, err, store.ErrNotFound)
	all, err := h.s.ListWorkflows(h.ctx)
	require.NoError(t, err)
	require.Len(t, all, 3)

	for _, tt := range []struct {
		namespace, name string
		want            bool
	}{
		{"ns", "wf", true}, {"ns", "", true}, {"", "wf", true}, {"", "", true},
		{"ns", "nope", false}, {"nope", "", false}, {"nope", "wf", false}, {"", "nope", false},
		{"n", "", false}, {"ns%", "", false}, {"NS", "", false},
	} {
		got, err := h.s.WorkflowExists(h.ctx, tt.namespace, tt.name)
		require.NoError(t, err)
		require.Equal(t, tt.want, got, "WorkflowExists(%q, %q)", tt.namespace, tt.name)
	}
}

func testListTasks(t *testing.T, h *harness) {
	for range 3 {
		h.insert(store.TaskInsert{Namespace: "a"}, store.TaskInsert{Namespace: "b", Workflow: "other", Version: "1"})
	}
	all, err := h.s.ListTasks(h.ctx, store.TaskFilter{})
	require.NoError(t, err)
	require.Len(t, all, 6)
	require.Greater(t, all[0].ID, all[5].ID, "newest first")
	byNS, err := h.s.ListTasks(h.ctx, store.TaskFilter{Namespace: "a"})
	require.NoError(t, err)
	require.Len(t, byNS, 3)
	byWF, err := h.s.ListTasks(h.ctx, store.TaskFilter{Workflow: "other"})
	require.NoError(t, err)
	require.Len(t, byWF, 3)
	page, err := h.s.ListTasks(h.ctx, store.TaskFilter{Limit: 2})
	require.NoError(t, err)
	require.Len(t, page, 2)
	next, err := h.s.ListTasks(h.ctx, store.TaskFilter{Limit: 10, BeforeID: page[1].ID})
	require.NoError(t, err)
	require.Len(t, next, 4)
	h.ok(h.claim("e1", 1)[0], `{}`)
	done, err := h.s.ListTasks(h.ctx, store.TaskFilter{State: state.TaskCompleted})
	require.NoError(t, err)
	require.Len(t, done, 1)
}

// testListActive: a list that asks for it tells where each unfinished
// task stands: its ready, running and waiting steps, not its pending or
// finished ones; a finished task has none.
func testListActive(t *testing.T, h *harness) {
	h.register("e1")
	id := h.insert(store.TaskInsert{Steps: chain("a", "b", "c")})[0].Task.ID
	active := func() []string {
		t.Helper()
		tasks, err := h.s.ListTasks(h.ctx, store.TaskFilter{Active: true})
		require.NoError(t, err)
		require.Len(t, tasks, 1)
		var out []string
		for _, s := range tasks[0].Active {
			out = append(out, s.Name+":"+string(s.State))
		}
		return out
	}
	require.Equal(t, []string{"a:ready"}, active())
	a := h.claim("e1", 1)[0]
	require.Equal(t, []string{"a:running"}, active())
	h.ok(a, `{}`)
	require.Equal(t, []string{"b:ready"}, active())
	b := h.claim("e1", 1)[0]
	require.NoError(t, h.complete(store.Outcome{Fence: b.Fence, EngineID: "e1", State: state.StepWaiting, Error: "flaky", RunAt: h.clock.Now().Add(time.Hour)})[0])
	require.Equal(t, []string{"b:waiting"}, active(), "a retry's backoff")
	plain, err := h.s.ListTasks(h.ctx, store.TaskFilter{})
	require.NoError(t, err)
	require.Nil(t, plain[0].Active, "only a list that asks")
	_, err = h.s.CancelTask(h.ctx, id, "e1", "done")
	require.NoError(t, err)
	require.Nil(t, active(), "a finished task stands nowhere")
}

func testAudit(t *testing.T, h *harness) {
	h.register("e1")
	id := h.insert(store.TaskInsert{Steps: chain("a", "b")})[0].Task.ID
	a := h.claim("e1", 1)[0]
	require.NoError(t, h.complete(store.Outcome{Fence: a.Fence, EngineID: "e1", State: state.StepWaiting, Error: "flaky"})[0])
	a = h.claim("e1", 1)[0]
	h.ok(a, `{}`)
	h.ok(h.claim("e1", 1)[0], `{}`)
	entries, err := h.s.Audit(h.ctx, id)
	require.NoError(t, err)
	type edge struct{ step, from, to string }
	var got []edge
	for _, e := range entries {
		got = append(got, edge{e.Step, e.From, e.To})
		require.False(t, e.At.IsZero())
		if e.Step != "" && e.To == string(state.StepRunning) {
			require.Equal(t, "e1", e.EngineID)
			require.NotZero(t, e.Attempt)
		}
	}
	require.Equal(t, []edge{
		{"", "", "pending"}, {"a", "", "ready"}, {"b", "", "pending"},
		{"a", "ready", "running"}, {"", "pending", "running"},
		{"a", "running", "ready"},
		{"a", "ready", "running"}, {"a", "running", "completed"}, {"b", "pending", "ready"},
		{"b", "ready", "running"}, {"b", "running", "completed"}, {"", "running", "completed"},
	}, got)
	// Every recorded step edge is legal in the state machine.
	for _, e := range entries {
		if e.Step != "" && e.From != "" {
			require.NoError(t, state.CheckStep(state.Step(e.From), state.Step(e.To)))
		}
		if e.Step == "" && e.From != "" {
			require.NoError(t, state.CheckTask(state.Task(e.From), state.Task(e.To)))
		}
	}
}

// testAuditClaimedTogether: steps of one task claimed together each record
// their claim once, and the task's start is recorded once, right after
// one of them.
func testAuditClaimedTogether(t *testing.T, h *harness) {
	h.register("e1")
	steps := []store.StepInsert{{Name: "a", Handler: "h", MaxAttempts: 1}, {Name: "b", Handler: "h", MaxAttempts: 1}, {Name: "c", Handler: "h", MaxAttempts: 1}}
	id := h.insert(store.TaskInsert{Steps: steps})[0].Task.ID
	other := h.insert(store.TaskInsert{Steps: steps[:2]})[0].Task.ID
	require.Len(t, h.claim("e1", 5), 5)
	for _, task := range []struct {
		id    int64
		steps []string
	}{{id, []string{"a", "b", "c"}}, {other, []string{"a", "b"}}} {
		entries, err := h.s.Audit(h.ctx, task.id)
		require.NoError(t, err)
		claimed := map[string]int{}
		starts := 0
		for i, e := range entries {
			switch {
			case e.Step != "" && e.To == string(state.StepRunning):
				require.Equal(t, string(state.StepReady), e.From)
				require.Equal(t, "claimed", e.Reason)
				require.Equal(t, "e1", e.EngineID)
				require.Equal(t, 1, e.Attempt)
				claimed[e.Step]++
			case e.Step == "" && e.To == string(state.TaskRunning):
				starts++
				require.Equal(t, "first step claimed", e.Reason)
				require.Equal(t, "e1", e.EngineID)
				require.Positive(t, i)
				require.Equal(t, string(state.StepRunning), entries[i-1].To, "the start follows a claim")
				require.Equal(t, "a", entries[i-1].Step, "the start follows the claim of the task's first step")
			}
		}
		want := map[string]int{}
		for _, s := range task.steps {
			want[s] = 1
		}
		require.Equal(t, want, claimed, "each step's claim once")
		require.Equal(t, 1, starts, "the task's start once")
	}
}
