package storetest

import (
	"cmp"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/internal/dag"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// Outcomes: readiness through a DAG, dependencies' results, failures,
// retries, snoozes, stale completions, checkpoints and released leases.

func testDiamondReadiness(t *testing.T, h *harness) {
	steps := []store.StepInsert{
		{Name: "a", Handler: "h", MaxAttempts: 1},
		{Name: "b", Handler: "h", MaxAttempts: 1, Deps: []int{0}},
		{Name: "c", Handler: "h", MaxAttempts: 1, Deps: []int{0}},
		{Name: "d", Handler: "h", MaxAttempts: 1, Deps: []int{1, 2}},
	}
	id := h.insert(store.TaskInsert{Input: json.RawMessage(`{"n":1}`), Steps: steps})[0].Task.ID
	a := h.claim("e1", 10)
	require.Equal(t, []string{"a"}, names(a))
	h.ok(a[0], `{"from":"a"}`)
	bc := h.claim("e1", 10)
	require.ElementsMatch(t, []string{"b", "c"}, names(bc))
	for _, c := range bc {
		require.Equal(t, map[string]json.RawMessage{"a": json.RawMessage(`{"from":"a"}`)}, c.Deps)
	}
	h.ok(bc[0], `{"from":"`+bc[0].Name+`"}`)
	require.Empty(t, h.claim("e1", 10), "d waits for both parents")
	h.ok(bc[1], `{"from":"`+bc[1].Name+`"}`)
	d := h.claim("e1", 10)
	require.Equal(t, []string{"d"}, names(d))
	require.JSONEq(t, `{"from":"b"}`, string(d[0].Deps["b"]))
	require.JSONEq(t, `{"from":"c"}`, string(d[0].Deps["c"]))
	require.JSONEq(t, `{"n":1}`, string(d[0].Input))
	h.ok(d[0], `{}`)
	task := h.task(id)
	require.Equal(t, state.TaskCompleted, task.State)
	require.NotNil(t, task.FinishedAt)
}

// testDependencyResults: a claimed step sees each dependency's result as it
// was stored, byte for byte (null where there is none), and none of a
// dependency that was skipped.
func testDependencyResults(t *testing.T, h *harness) {
	const odd = `{"s":"é \"q\" \\ \u0001 😀","n":1e400,"z":[ 1 , 2 ]}`
	steps := []store.StepInsert{
		{Name: "odd", Handler: "h", MaxAttempts: 1},
		{Name: "none", Handler: "h", MaxAttempts: 1},
		{Name: "text", Handler: "h", MaxAttempts: 1},
		{Name: "skipped", Handler: "h", MaxAttempts: 1},
		{Name: "all", Handler: "h", MaxAttempts: 1, Deps: []int{0, 1, 2, 3}, TriggerRule: string(dag.AllDone)},
		{Name: "only-skipped", Handler: "h", MaxAttempts: 1, Deps: []int{3}, TriggerRule: string(dag.AllDone)},
	}
	h.insert(store.TaskInsert{Steps: steps})
	parents := h.claim("e1", 10)
	require.Len(t, parents, 4)
	results := map[string]string{"odd": odd, "text": `"just a string"`}
	for _, c := range parents {
		o := store.Outcome{Fence: c.Fence, EngineID: "e1", State: state.StepCompleted}
		switch c.Name {
		case "skipped":
			o.State, o.Reason = state.StepSkipped, "when: false"
		case "none":
		default:
			o.Result = json.RawMessage(results[c.Name])
		}
		require.NoError(t, h.complete(o)[0])
	}
	children := map[string]store.ClaimedStep{}
	for _, c := range h.claim("e1", 10) {
		children[c.Name] = c
	}
	require.Len(t, children, 2)
	require.Equal(t, map[string]json.RawMessage{"odd": json.RawMessage(odd), "none": json.RawMessage("null"),
		"text": json.RawMessage(`"just a string"`)}, children["all"].Deps)
	require.Equal(t, []string{"odd", "none", "text"}, children["all"].DependsOn)
	require.Empty(t, children["only-skipped"].Deps)
}

// testParentsEndingTogether: parents whose outcomes are recorded in one
// batch decide their child as if they had ended one at a time, in step
// order: a skip names the parent that decided it, a run is one transition.
func testParentsEndingTogether(t *testing.T, h *harness) {
	for _, tc := range []struct {
		name   string
		rule   dag.Rule
		failed []string // the parents that fail; the others succeed
		want   state.Step
		reason string // of the child's transition
	}{
		{"all succeed", dag.AllSuccess, nil, state.StepReady, "dependencies satisfied"},
		{"the second fails first", dag.AllSuccess, []string{"p2", "p3"}, state.StepSkipped, `dependency "p2" failed`},
		{"one success, the third", dag.OneSuccess, []string{"p1", "p2"}, state.StepReady, "dependencies satisfied"},
		{"one failed, none", dag.OneFailed, nil, state.StepSkipped, `trigger rule one_failed is false (dependency "p3" completed)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A handler of its own: the children of the cases before stay
			// ready.
			handler := "h-" + tc.name
			id := h.insert(store.TaskInsert{Steps: []store.StepInsert{
				{Name: "p1", Handler: handler, MaxAttempts: 1},
				{Name: "p2", Handler: handler, MaxAttempts: 1},
				{Name: "p3", Handler: handler, MaxAttempts: 1},
				{Name: "child", Handler: handler, MaxAttempts: 1, Deps: []int{0, 1, 2}, TriggerRule: string(tc.rule)},
			}})[0].Task.ID
			parents := h.claimWith(store.ClaimParams{EngineID: "e1", Limit: 10, Handlers: []string{handler}})
			require.Len(t, parents, 3)
			slices.SortFunc(parents, func(a, b store.ClaimedStep) int { return cmp.Compare(a.ID, b.ID) })
			outcomes := make([]store.Outcome, len(parents))
			for i, c := range parents {
				outcomes[i] = store.Outcome{Fence: c.Fence, EngineID: "e1", State: state.StepCompleted, Result: json.RawMessage(`{}`)}
				if slices.Contains(tc.failed, c.Name) {
					outcomes[i].State, outcomes[i].Result, outcomes[i].Error = state.StepFailed, nil, "boom"
				}
			}
			for _, err := range h.complete(outcomes...) {
				require.NoError(t, err)
			}
			require.Equal(t, tc.want, states(h.task(id))["child"])
			audit, err := h.s.Audit(h.ctx, id)
			require.NoError(t, err)
			var reasons []string
			for _, e := range audit {
				if e.Step == "child" && e.From == string(state.StepPending) {
					reasons = append(reasons, e.Reason)
				}
			}
			require.Equal(t, []string{tc.reason}, reasons, "one transition of the child")
		})
	}
}

func testFailureSkipsDescendants(t *testing.T, h *harness) {
	steps := []store.StepInsert{
		{Name: "a", Handler: "h", MaxAttempts: 1},
		{Name: "b", Handler: "h", MaxAttempts: 1, Deps: []int{0}},
		{Name: "c", Handler: "h", MaxAttempts: 1, Deps: []int{1}},
		{Name: "side", Handler: "h", MaxAttempts: 1},
	}
	id := h.insert(store.TaskInsert{Steps: steps})[0].Task.ID
	got := h.claim("e1", 10)
	require.ElementsMatch(t, []string{"a", "side"}, names(got))
	for _, c := range got {
		if c.Name == "a" {
			require.NoError(t, h.complete(store.Outcome{Fence: c.Fence, State: state.StepFailed, Error: "boom"})[0])
		}
	}
	task := h.task(id)
	require.Equal(t, state.TaskRunning, task.State, "the independent branch still runs")
	require.Equal(t, map[string]state.Step{"a": state.StepFailed, "b": state.StepSkipped, "c": state.StepSkipped, "side": state.StepRunning}, states(task))
	for _, c := range got {
		if c.Name == "side" {
			h.ok(c, `{}`)
		}
	}
	task = h.task(id)
	require.Equal(t, state.TaskFailed, task.State)
	require.Contains(t, task.Error, "boom")
	require.Contains(t, task.Error, `"a"`)
}

func testRetryWaits(t *testing.T, h *harness) {
	h.insert(store.TaskInsert{})
	c := h.claim("e1", 1)[0]
	runAt := h.clock.Now().Add(time.Minute)
	require.NoError(t, h.complete(store.Outcome{Fence: c.Fence, State: state.StepWaiting, RunAt: runAt, Error: "try later"})[0])
	task := h.task(c.TaskID)
	require.Equal(t, state.StepWaiting, task.Steps[0].State)
	require.Equal(t, "try later", task.Steps[0].Error)
	next, ok, err := h.s.NextWake(h.ctx)
	require.NoError(t, err)
	require.True(t, ok)
	require.WithinDuration(t, runAt, next, time.Millisecond)
	require.Empty(t, h.claim("e1", 1), "not ready before run_at")
	n, err := h.s.Promote(h.ctx, h.clock.Now(), "e1")
	require.NoError(t, err)
	require.Zero(t, n)
	h.clock.Advance(time.Minute)
	n, err = h.s.Promote(h.ctx, h.clock.Now(), "e1")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	again := h.claim("e1", 1)
	require.Len(t, again, 1)
	require.Equal(t, 2, again[0].Attempts)
}

func testSnooze(t *testing.T, h *harness) {
	h.insert(store.TaskInsert{})
	c := h.claim("e1", 1)[0]
	require.NoError(t, h.complete(store.Outcome{Fence: c.Fence, State: state.StepWaiting, RunAt: h.clock.Now().Add(time.Second), Snooze: true})[0])
	h.clock.Advance(time.Second)
	_, err := h.s.Promote(h.ctx, h.clock.Now(), "e1")
	require.NoError(t, err)
	again := h.claim("e1", 1)
	require.Len(t, again, 1)
	require.Equal(t, 1, again[0].Attempts, "a snooze does not use up an attempt")
}

func testStaleCompletion(t *testing.T, h *harness) {
	h.register("e1")
	h.register("e2")
	h.insert(store.TaskInsert{})
	first := h.claim("e1", 1)[0]
	// e1 is declared dead; e2 takes the step over.
	_, err := h.s.Reap(h.ctx, h.clock.Now(), h.clock.Now().Add(-time.Hour), []string{"e1"}, "e2")
	require.NoError(t, err)
	second := h.claim("e2", 1)[0]
	require.Equal(t, first.ID, second.ID)
	require.Equal(t, 2, second.Fence.Attempt)
	res := h.complete(
		store.Outcome{Fence: first.Fence, EngineID: "e1", State: state.StepCompleted, Result: json.RawMessage(`"stale"`)},
		store.Outcome{Fence: second.Fence, EngineID: "e2", State: state.StepCompleted, Result: json.RawMessage(`"fresh"`)},
	)
	require.ErrorIs(t, res[0], store.ErrStaleLease)
	require.NoError(t, res[1])
	// A repeated completion of the same attempt is refused too.
	require.ErrorIs(t, h.complete(store.Outcome{Fence: second.Fence, State: state.StepCompleted})[0], store.ErrStaleLease)
	task := h.task(first.TaskID)
	require.JSONEq(t, `"fresh"`, string(task.Steps[0].Result))
	require.Equal(t, state.TaskCompleted, task.State)
}

func testCheckpointDeferred(t *testing.T, h *harness) {
	h.insert(store.TaskInsert{})
	c := h.claim("e1", 1)[0]
	require.NoError(t, h.s.SaveCheckpoint(h.ctx, c.Fence, json.RawMessage(`{"cursor":7}`)))
	require.NoError(t, h.s.SetDeferred(h.ctx, c.Fence, "e1", true))
	step := h.task(c.TaskID).Steps[0]
	require.Equal(t, state.SubDeferred, step.Sub)
	require.JSONEq(t, `{"cursor":7}`, string(step.Checkpoint))
	require.NoError(t, h.s.SetDeferred(h.ctx, c.Fence, "e1", false))
	require.Empty(t, h.task(c.TaskID).Steps[0].Sub)
	stale := c.Fence
	stale.Attempt++
	require.ErrorIs(t, h.s.SaveCheckpoint(h.ctx, stale, json.RawMessage(`{}`)), store.ErrStaleLease)
	require.ErrorIs(t, h.s.SetDeferred(h.ctx, stale, "e1", true), store.ErrStaleLease)
	// The checkpoint survives a retry and is handed to the next attempt.
	require.NoError(t, h.complete(store.Outcome{Fence: c.Fence, State: state.StepWaiting})[0])
	again := h.claim("e1", 1)[0]
	require.JSONEq(t, `{"cursor":7}`, string(again.Checkpoint))
}

func testReleaseLease(t *testing.T, h *harness) {
	h.register("e1")
	h.insert(store.TaskInsert{}, store.TaskInsert{})
	got := h.claimWith(store.ClaimParams{EngineID: "e1", Limit: 1, LeaseID: 42})
	require.Len(t, got, 1)
	require.Equal(t, int64(42), got[0].Fence.LeaseID)
	other := h.claimWith(store.ClaimParams{EngineID: "e1", Limit: 1, LeaseID: 43})
	require.Len(t, other, 1)
	n, err := h.s.ReleaseLease(h.ctx, "e1", 42)
	require.NoError(t, err)
	require.Equal(t, 1, n, "only the steps of that lease")
	step := h.task(got[0].TaskID).Steps[0]
	require.Equal(t, state.StepReady, step.State)
	require.Equal(t, 0, step.Attempts, "the attempt that never started is given back")
	require.Equal(t, state.StepRunning, h.task(other[0].TaskID).Steps[0].State)
	n, err = h.s.ReleaseLease(h.ctx, "e1", 42)
	require.NoError(t, err)
	require.Zero(t, n)
	again := h.claim("e1", 1)
	require.Len(t, again, 1)
	require.Equal(t, 1, again[0].Attempts)
}
