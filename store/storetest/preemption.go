package storetest

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// preemptionTests are the conformance tests of preemption: the peek at the
// step a claim would take first, and the outcome of a preempted attempt.
var preemptionTests = []struct {
	name string
	fn   func(t *testing.T, h *harness)
}{
	{"PeekClaimMarksNothing", testPeekClaim},
	{"PeekClaimHonoursPolicies", testPeekClaimPolicies},
	{"PreemptedStepReturnsToReady", testPreempted},
	{"HeldPreemptible", testHeldPreemptible},
}

func (h *harness) peek(p store.ClaimParams) *store.Step {
	h.t.Helper()
	p.Now = h.clock.Now()
	got, err := h.s.PeekClaim(h.ctx, p)
	require.NoError(h.t, err)
	return got
}

// testPeekClaim: the peek returns the step the claim takes first, with its
// priority, and leaves it ready; with nothing claimable it returns nil.
func testPeekClaim(t *testing.T, h *harness) {
	require.Nil(t, h.peek(store.ClaimParams{EngineID: "e1", Limit: 1}))
	low := h.insert(store.TaskInsert{Steps: []store.StepInsert{{Name: "crunch", Handler: "h", MaxAttempts: 1, Preemptible: true}}})[0].Task.ID
	high := h.insert(store.TaskInsert{Priority: 3, Steps: []store.StepInsert{{Name: "alert", Handler: "h", MaxAttempts: 1, Priority: 2}}})[0].Task.ID
	require.True(t, h.task(low).Steps[0].Preemptible, "the flag is stored")
	require.False(t, h.task(high).Steps[0].Preemptible)

	for range 2 { // a peek changes nothing: the same answer twice
		top := h.peek(store.ClaimParams{EngineID: "e1", Limit: 1})
		require.NotNil(t, top)
		require.Equal(t, high, top.TaskID)
		require.Equal(t, "alert", top.Name)
		require.Equal(t, 5, top.Priority)
		require.Equal(t, "ns", top.Namespace)
		require.Equal(t, state.StepReady, h.task(high).Steps[0].State)
	}
	require.Nil(t, h.peek(store.ClaimParams{EngineID: "e1", Limit: 1, Handlers: []string{"other"}}), "the claim's predicates apply")
	require.Nil(t, h.peek(store.ClaimParams{EngineID: "e1", Limit: 1, TaskID: high + 1000}))

	got := h.claim("e1", 1)
	require.Equal(t, []string{"alert"}, names(got), "the claim takes what the peek saw")
	top := h.peek(store.ClaimParams{EngineID: "e1", Limit: 1})
	require.Equal(t, low, top.TaskID)
	c := h.claim("e1", 1)[0]
	require.True(t, c.Preemptible, "a claimed step says it is preemptible")
	require.Nil(t, h.peek(store.ClaimParams{EngineID: "e1", Limit: 1}))
}

// testPeekClaimPolicies: a paused target and a full limit are skipped by
// the peek as by the claim.
func testPeekClaimPolicies(t *testing.T, h *harness) {
	h.insert(store.TaskInsert{Namespace: "shop", Steps: []store.StepInsert{{Name: "a", Handler: "h", MaxAttempts: 1}}})
	keyed := func(prio int) int64 {
		return h.insert(store.TaskInsert{Namespace: "ops", Priority: prio,
			Steps: []store.StepInsert{{Name: "k", Handler: "h", MaxAttempts: 1, LimitKey: "step:ops/wf/k", Limit: 1}}})[0].Task.ID
	}
	first := keyed(5)
	second := keyed(4)
	require.Equal(t, first, h.peek(store.ClaimParams{EngineID: "e1", Limit: 1}).TaskID)
	running := h.claim("e1", 1)[0]
	require.Equal(t, first, running.TaskID)
	// The key's limit is full: the peek passes over the second keyed step.
	top := h.peek(store.ClaimParams{EngineID: "e1", Limit: 1})
	require.NotNil(t, top)
	require.Equal(t, "shop", top.Namespace)
	h.setPolicy(store.PolicyChange{Target: "shop", Paused: ptr(true)})
	require.Nil(t, h.peek(store.ClaimParams{EngineID: "e1", Limit: 1}), "paused work is not what a claim would take")
	h.ok(running, `null`)
	require.Equal(t, second, h.peek(store.ClaimParams{EngineID: "e1", Limit: 1}).TaskID)
	h.setPolicy(store.PolicyChange{Target: store.TargetAll, Paused: ptr(true)})
	require.Nil(t, h.peek(store.ClaimParams{EngineID: "e1", Limit: 1}))
}

// testPreempted: the outcome of a preempted attempt (ready at once, its
// attempt given back) keeps the checkpoint, records the preemptor in the
// audit, and is fenced like any outcome.
func testPreempted(t *testing.T, h *harness) {
	id := h.insert(store.TaskInsert{Steps: []store.StepInsert{{Name: "crunch", Handler: "h", MaxAttempts: 1, Preemptible: true}}})[0].Task.ID
	c := h.claim("e1", 1)[0]
	require.Equal(t, 1, c.Fence.Attempt)
	require.NoError(t, h.s.SaveCheckpoint(h.ctx, c.Fence, json.RawMessage(`{"row":40}`)))
	reason := `preempted by task 9 step "alert" (priority 5)`
	preempt := func(f store.Fence) error {
		return h.complete(store.Outcome{Fence: f, EngineID: "e1", State: state.StepReady, Snooze: true, Reason: reason})[0]
	}
	stale := c.Fence
	stale.LeaseID++
	require.ErrorIs(t, preempt(stale), store.ErrStaleLease, "a stale fence cannot preempt")
	require.NoError(t, preempt(c.Fence))
	require.ErrorIs(t, preempt(c.Fence), store.ErrStaleLease, "nor the same attempt twice")

	st := h.task(id).Steps[0]
	require.Equal(t, state.StepReady, st.State)
	require.Equal(t, 0, st.Attempts, "the attempt was given back")
	require.JSONEq(t, `{"row":40}`, string(st.Checkpoint))
	trail, err := h.s.Audit(h.ctx, id)
	require.NoError(t, err)
	last := trail[len(trail)-1]
	require.Equal(t, store.AuditEntry{ID: last.ID, TaskID: id, Step: "crunch", From: "running", To: "ready", At: last.At, Attempt: 1,
		EngineID: last.EngineID, Reason: reason}, last)

	events := h.history(store.HistoryQuery{TaskID: id}, len(trail))
	require.Len(t, events, len(trail))
	require.Equal(t, "step.preempted", events[len(events)-1].Type, "the history names the preemption")

	again := h.claim("e1", 1)[0]
	require.Equal(t, 1, again.Fence.Attempt, "the next run has the same number")
	require.JSONEq(t, `{"row":40}`, string(again.Checkpoint))
	res := h.complete(
		store.Outcome{Fence: c.Fence, EngineID: "e1", State: state.StepCompleted, Result: json.RawMessage(`"stale"`)},
		store.Outcome{Fence: again.Fence, EngineID: "e1", State: state.StepCompleted, Result: json.RawMessage(`"done"`)},
	)
	require.ErrorIs(t, res[0], store.ErrStaleLease, "the preempted attempt cannot complete")
	require.NoError(t, res[1])
	require.Equal(t, state.TaskCompleted, h.task(id).State)
}

// testHeldPreemptible: of the fences a worker lists, only the preemptible
// steps it holds under exactly those fences come back, with what the
// decision needs.
func testHeldPreemptible(t *testing.T, h *harness) {
	held := func(engine string, fences ...store.Fence) []store.ClaimedStep {
		t.Helper()
		got, err := h.s.HeldPreemptible(h.ctx, engine, fences)
		require.NoError(t, err)
		return got
	}
	require.Empty(t, held("w1"))
	h.insert(store.TaskInsert{Steps: []store.StepInsert{{Name: "crunch", Handler: "py.crunch", MaxAttempts: 2, Priority: -1, Preemptible: true}}})
	h.insert(store.TaskInsert{Priority: 1, Steps: []store.StepInsert{{Name: "plain", Handler: "py.plain", MaxAttempts: 2}}})
	claimed := h.claim("w1", 2)
	require.Len(t, claimed, 2)
	fences := []store.Fence{claimed[0].Fence, claimed[1].Fence}
	got := held("w1", fences...)
	require.Len(t, got, 1, "only the preemptible step")
	c := got[0]
	require.Equal(t, "crunch", c.Name)
	require.Equal(t, "py.crunch", c.Handler)
	require.Equal(t, "ns", c.Namespace)
	require.Equal(t, -1, c.Priority)
	require.True(t, c.Preemptible)
	want := claimed[0].Fence
	if claimed[0].Name != "crunch" {
		want = claimed[1].Fence
	}
	require.Equal(t, want, c.Fence)
	require.Equal(t, 1, c.Attempts)
	require.NotEmpty(t, c.Workflow)

	stale := want
	stale.LeaseID++
	require.Empty(t, held("w1", stale), "another lease is not held")
	require.Empty(t, held("w2", fences...), "another worker holds nothing")
}
