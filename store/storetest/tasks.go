package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// Tasks in and steps out: insertion, idempotency, the claim's limits,
// handlers, priorities and caps.

func testInsertAndGet(t *testing.T, h *harness) {
	res := h.insert(store.TaskInsert{Input: json.RawMessage(`{"a":1}`), Priority: 2, Steps: chain("x", "y")})
	require.Len(t, res, 1)
	require.False(t, res[0].Duplicate)
	task := h.task(res[0].Task.ID)
	require.Equal(t, state.TaskPending, task.State)
	require.JSONEq(t, `{"a":1}`, string(task.Input))
	require.Equal(t, "ns", task.Namespace)
	require.Equal(t, map[string]state.Step{"x": state.StepReady, "y": state.StepPending}, states(task))
	require.Equal(t, []string{"x"}, task.Steps[1].DependsOn)
	_, err := h.s.GetTask(h.ctx, 999999)
	require.ErrorIs(t, err, store.ErrNotFound)
	other := h.insert(store.TaskInsert{})[0].Task.ID
	_, err = h.s.CancelTask(h.ctx, other, "e1", "test")
	require.NoError(t, err)
	sts, err := h.s.TaskStates(h.ctx, []int64{task.ID, 999999, other})
	require.NoError(t, err)
	require.Equal(t, map[int64]state.Task{task.ID: state.TaskPending, other: state.TaskCancelled}, sts, "a task not found is left out")
	sts, err = h.s.TaskStates(h.ctx, []int64{task.ID})
	require.NoError(t, err)
	require.Equal(t, map[int64]state.Task{task.ID: state.TaskPending}, sts)
}

// testManySteps: a task of more steps than one statement inserts (a
// store may write a task's steps in statements of several rows) keeps
// every step, in order, on every submission path.
func testManySteps(t *testing.T, h *harness) {
	const n = 150
	steps := make([]store.StepInsert, n)
	for i := range steps {
		steps[i] = store.StepInsert{Name: fmt.Sprintf("s%03d", i), Handler: "h", MaxAttempts: 1}
	}
	res := h.insert(store.TaskInsert{Steps: steps},
		store.TaskInsert{Steps: steps, IdempotencyKey: "many", Supersede: true})
	for _, r := range res {
		task := h.task(r.Task.ID)
		require.Len(t, task.Steps, n)
		for i, st := range task.Steps {
			require.Equal(t, fmt.Sprintf("s%03d", i), st.Name)
			require.Equal(t, i, st.Index)
			require.Equal(t, state.StepReady, st.State)
		}
	}
}

func testIdempotency(t *testing.T, h *harness) {
	first := h.insert(store.TaskInsert{IdempotencyKey: "k1"})[0]
	require.False(t, first.Duplicate)
	// Again, and twice within one batch: one task.
	res := h.insert(store.TaskInsert{IdempotencyKey: "k1"}, store.TaskInsert{IdempotencyKey: "k2"}, store.TaskInsert{IdempotencyKey: "k2"})
	require.True(t, res[0].Duplicate)
	require.Equal(t, first.Task.ID, res[0].Task.ID)
	require.False(t, res[1].Duplicate)
	require.True(t, res[2].Duplicate)
	require.Equal(t, res[1].Task.ID, res[2].Task.ID)
	// Keys are per namespace.
	other := h.insert(store.TaskInsert{Namespace: "other", IdempotencyKey: "k1"})[0]
	require.False(t, other.Duplicate)
	tasks, err := h.s.ListTasks(h.ctx, store.TaskFilter{})
	require.NoError(t, err)
	require.Len(t, tasks, 3)
}

func testBulkInsertAtomic(t *testing.T, h *harness) {
	many := make([]store.TaskInsert, 500)
	res := h.insert(many...)
	require.Len(t, res, 500)
	// A batch with one bad task inserts nothing.
	bad := []store.TaskInsert{{Namespace: "ns", Workflow: "wf", Version: "1", Steps: chain("a")}, {Namespace: "ns", Workflow: "wf", Version: "1",
		Steps: []store.StepInsert{{Name: "a", Handler: "h", Deps: []int{5}}}}}
	_, err := h.s.InsertTasks(h.ctx, bad)
	require.Error(t, err)
	tasks, err := h.s.ListTasks(h.ctx, store.TaskFilter{Limit: 1000})
	require.NoError(t, err)
	require.Len(t, tasks, 500)
}

func testClaimLimit(t *testing.T, h *harness) {
	h.register("e1")
	h.insert(make([]store.TaskInsert, 5)...)
	got := h.claim("e1", 3)
	require.Len(t, got, 3)
	for _, c := range got {
		require.Equal(t, state.StepRunning, c.State)
		require.Equal(t, 1, c.Attempts)
		require.Equal(t, 1, c.Fence.Attempt)
		require.NotZero(t, c.Fence.LeaseID)
		require.Equal(t, "e1", c.EngineID)
		require.JSONEq(t, `{}`, string(c.Input))
		require.Equal(t, "wf", c.Workflow)
		require.Equal(t, state.TaskRunning, h.task(c.TaskID).State)
	}
	require.Len(t, h.claim("e1", 10), 2)
	require.Empty(t, h.claim("e1", 10))
}

// testClaimedStepIsItsRow: what a claim returns of each step is the step
// as stored once claimed, whether the claim takes it fresh, after a failed
// attempt that left an error and a time to run at, with a checkpoint and
// a timeout, alone or among many (a claim returns only the columns it does
// not set itself, and fills those in).
func testClaimedStepIsItsRow(t *testing.T, h *harness) {
	h.register("e1")
	steps := []store.StepInsert{{Name: "first", Handler: "h", MaxAttempts: 3, Timeout: time.Minute, Priority: 2},
		{Name: "second", Handler: "h", Deps: []int{0}, MaxAttempts: 1}}
	inserts := make([]store.TaskInsert, 6)
	for i := range inserts {
		inserts[i].Steps = steps
	}
	h.insert(inserts...)
	same := func(got []store.ClaimedStep) {
		t.Helper()
		for _, c := range got {
			stored := h.task(c.TaskID).Steps[c.Index]
			require.Equal(t, stored, c.Step, "step %d of task %d", c.Index, c.TaskID)
			require.Equal(t, state.StepRunning, c.State)
			require.Equal(t, "e1", c.EngineID)
			require.True(t, c.StartedAt.Equal(h.clock.Now()), "started %v, claimed at %v", c.StartedAt, h.clock.Now())
		}
	}
	many := h.claim("e1", 4)
	require.Len(t, many, 4)
	same(many)
	// A failed attempt: an error and a time to run at, both cleared by the
	// next claim; a checkpoint, kept.
	c := many[0]
	require.NoError(t, h.s.SaveCheckpoint(h.ctx, c.Fence, json.RawMessage(`{"page":3}`)))
	require.NoError(t, h.complete(store.Outcome{Fence: c.Fence, EngineID: "e1", State: state.StepWaiting, RunAt: h.clock.Now().Add(time.Second), Error: "boom"})[0])
	h.clock.Advance(time.Second)
	_, err := h.s.Promote(h.ctx, h.clock.Now(), "e1")
	require.NoError(t, err)
	again := h.claimWith(store.ClaimParams{EngineID: "e1", Limit: 1, TaskID: c.TaskID})
	require.Len(t, again, 1)
	require.Equal(t, 2, again[0].Attempts)
	require.JSONEq(t, `{"page":3}`, string(again[0].Checkpoint))
	require.Empty(t, again[0].Error)
	same(again)
	// One claimed alone, and the rest.
	h.clock.Advance(time.Second)
	same(h.claim("e1", 1))
	h.clock.Advance(time.Second)
	same(h.claim("e1", 10))
	// A child made ready by its dependency's end.
	h.ok(again[0], `{"n":1}`)
	h.clock.Advance(time.Second)
	children := h.claimWith(store.ClaimParams{EngineID: "e1", Limit: 1, TaskID: c.TaskID})
	require.Equal(t, []string{"second"}, names(children))
	same(children)
}

func testClaimByHandler(t *testing.T, h *harness) {
	h.insert(store.TaskInsert{Steps: []store.StepInsert{{Name: "a", Handler: "remote", MaxAttempts: 1}}},
		store.TaskInsert{Steps: []store.StepInsert{{Name: "b", Handler: "local", MaxAttempts: 1}}})
	got := h.claimWith(store.ClaimParams{EngineID: "e1", Limit: 10, Handlers: []string{"local"}})
	require.Equal(t, []string{"b"}, names(got))
}

func testPriorityAging(t *testing.T, h *harness) {
	// Aging is one level per 10s. "old" waits 60s at priority 0 and is worth
	// 6 levels by then: it beats a new priority-5 step but not priority 10.
	h.insert(store.TaskInsert{Steps: chain("old")})
	h.clock.Advance(60 * time.Second)
	h.insert(store.TaskInsert{Priority: 5, Steps: chain("p5")}, store.TaskInsert{Priority: 10, Steps: chain("p10")},
		store.TaskInsert{Priority: 0, Steps: chain("new")})
	var order []string
	for range 4 {
		order = append(order, names(h.claim("e1", 1))...)
	}
	require.Equal(t, []string{"p10", "old", "p5", "new"}, order)
}

func testNamespaceCaps(t *testing.T, h *harness) {
	for range 5 {
		h.insert(store.TaskInsert{Namespace: "capped"}, store.TaskInsert{Namespace: "free"})
	}
	caps := map[string]int{"capped": 2}
	got := h.claimWith(store.ClaimParams{EngineID: "e1", Limit: 10, Caps: caps})
	count := map[string]int{}
	for _, c := range got {
		count[c.Namespace]++
	}
	require.Equal(t, map[string]int{"capped": 2, "free": 5}, count)
	// The cap counts running steps of every engine.
	require.Empty(t, h.claimWith(store.ClaimParams{EngineID: "e2", Limit: 10, Caps: caps}))
	for _, c := range got {
		if c.Namespace == "capped" {
			h.ok(c, `{}`)
			break
		}
	}
	require.Len(t, h.claimWith(store.ClaimParams{EngineID: "e2", Limit: 10, Caps: caps}), 1)
}

// testCloseTwice: Close may be called again (a deferred Close after an
// explicit one), and a store that is closed answers with an error, reads
// and writes alike, rather than hanging or panicking.
func testCloseTwice(t *testing.T, h *harness) {
	id := h.insert(store.TaskInsert{Steps: chain("x")})[0].Task.ID
	require.NoError(t, h.s.Close())
	require.NoError(t, h.s.Close(), "a second Close")
	ctx, cancel := context.WithTimeout(h.ctx, 10*time.Second)
	defer cancel()
	_, err := h.s.GetTask(ctx, id)
	require.Error(t, err, "a read of a closed store")
	_, err = h.s.InsertTasks(ctx, []store.TaskInsert{{Namespace: "ns", Workflow: "wf", Version: "1", Steps: chain("x")}})
	require.Error(t, err, "a write to a closed store")
	require.NoError(t, ctx.Err(), "the closed store answered at once")
}
