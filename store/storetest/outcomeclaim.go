package storetest

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// outcomeClaimTests are the conformance tests of a claim made in the
// transaction that records outcomes (store.OutcomeClaimer) or inserts
// tasks (store.SubmitClaimer).
var outcomeClaimTests = []struct {
	name string
	fn   func(t *testing.T, h *harness)
}{
	{"CompleteAndClaimTakesTheChildren", testCompleteAndClaim},
	{"InsertAndClaimTakesTheFirstSteps", testInsertAndClaim},
	{"ChildClaimedWithItsParentsSeesTheirResults", testClaimedWithParentsResults},
	{"ReadiedAndClaimedAgainRecordsEachClaim", testReadiedAndClaimedAgain},
	{"ResumeFunctionInTheCallsWrite", testResumeFunction},
}

// testClaimedWithParentsResults: a child claimed in the transaction that
// records the ends of all its dependencies sees their results as a child
// claimed after them does: a completed step's result as recorded, a batch
// step that failed as the results of its items (none); and its task's
// input, workflow, version and traceparent. The twin task's dependencies
// end in two batches, its child claimed with the second.
func testClaimedWithParentsResults(t *testing.T, h *harness) {
	oc, ok := h.s.(store.OutcomeClaimer)
	if !ok {
		t.Skip("the store does not claim with outcomes")
	}
	steps := []store.StepInsert{
		{Name: "x", Handler: "h", MaxAttempts: 1},
		{Name: "y", Handler: "h", MaxAttempts: 1, Kind: store.KindBatch},
		{Name: "j", Handler: "h", MaxAttempts: 1, Deps: []int{0, 1}, TriggerRule: "all_done"},
	}
	ends := func(c []store.ClaimedStep) []store.Outcome {
		var out []store.Outcome
		for _, s := range c {
			o := store.Outcome{Fence: s.Fence, EngineID: "e1", State: state.StepCompleted, Result: json.RawMessage(`{"n": 1,  "from" : "x"}`)}
			if s.Name == "y" {
				o.State, o.Result, o.Error = state.StepFailed, nil, "split failed"
			}
			out = append(out, o)
		}
		return out
	}
	deps := map[bool]map[string]json.RawMessage{}
	for _, together := range []bool{true, false} {
		const traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
		id := h.insert(store.TaskInsert{Workflow: "chain", Version: "7", Input: json.RawMessage(`{"in": 1}`),
			TraceParent: traceparent, Steps: steps})[0].Task.ID
		xy := h.claim("e1", 10)
		require.Equal(t, []string{"x", "y"}, names(xy))
		batches := [][]store.Outcome{ends(xy)}
		if !together {
			batches = [][]store.Outcome{ends(xy[:1]), ends(xy[1:])}
		}
		var claimed []store.ClaimedStep
		for _, b := range batches {
			results, got, err := oc.CompleteAndClaim(h.ctx, b, store.ClaimParams{EngineID: "e1", Limit: 5, LeaseID: 78})
			require.NoError(t, err)
			require.Equal(t, make([]error, len(b)), results)
			claimed = append(claimed, got...)
		}
		require.Equal(t, []string{"j"}, names(claimed), "task %d", id)
		require.Equal(t, []string{"x", "y"}, claimed[0].DependsOn)
		c := claimed[0]
		require.Equal(t, []string{"chain", "7", traceparent}, []string{c.Workflow, c.Version, c.TraceParent}, "its task's")
		require.JSONEq(t, `{"in": 1}`, string(c.Input), "its task's input")
		deps[together] = claimed[0].Deps
	}
	require.Equal(t, `{"n": 1,  "from" : "x"}`, string(deps[true]["x"]), "the result as recorded")
	require.JSONEq(t, `[]`, string(deps[true]["y"]), "a batch step's items' results")
	require.Equal(t, deps[false], deps[true])
}

// testCompleteAndClaim: recording outcomes that make steps ready claims
// them in the same transaction, as a claim would, and wakes no engine when
// it took every one; a child under a key of a limit, more children than
// slots, or outcomes that make nothing ready leave the claim to ClaimSteps
// and the engines are woken as usual.
func testCompleteAndClaim(t *testing.T, h *harness) {
	oc, ok := h.s.(store.OutcomeClaimer)
	if !ok {
		t.Skip("the store does not claim with outcomes")
	}
	fanOut := func(child store.StepInsert, n int) []store.StepInsert {
		steps := []store.StepInsert{{Name: "a", Handler: "h", MaxAttempts: 1}}
		for i := range n {
			c := child
			c.Name, c.Deps = string(rune('b'+i)), []int{0}
			steps = append(steps, c)
		}
		return steps
	}
	plain := store.StepInsert{Handler: "h", MaxAttempts: 2}
	for _, tc := range []struct {
		name    string
		steps   []store.StepInsert
		limit   int
		claimed []string // by CompleteAndClaim
		woken   bool
	}{
		{"one child", fanOut(plain, 1), 5, []string{"b"}, false},
		{"two children, slots for both", fanOut(plain, 2), 5, []string{"b", "c"}, false},
		{"two children, one slot", fanOut(plain, 2), 1, []string{"b"}, true},
		{"a child under a key of a limit", fanOut(store.StepInsert{Handler: "h", MaxAttempts: 1, LimitKey: "k", Limit: 1}, 1), 5, nil, true},
		{"no child", fanOut(plain, 0), 5, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := h.insert(store.TaskInsert{Steps: tc.steps})[0].Task.ID
			// A claim reads the policies first, as an engine's claim loop
			// does before any outcome.
			a := h.claim("e1", 10)
			require.Equal(t, []string{"a"}, names(a))
			h.drainWake()
			results, claimed, err := oc.CompleteAndClaim(h.ctx, []store.Outcome{{Fence: a[0].Fence, EngineID: "e1", State: state.StepCompleted,
				Result: json.RawMessage(`{"from":"a"}`)}}, store.ClaimParams{EngineID: "e1", Limit: tc.limit, LeaseID: 77})
			require.NoError(t, err)
			require.Equal(t, []error{nil}, results)
			if tc.claimed == nil {
				require.Empty(t, claimed)
			} else {
				require.Equal(t, tc.claimed, names(claimed))
			}
			for _, c := range claimed {
				require.Equal(t, state.StepRunning, c.State)
				require.Equal(t, 1, c.Attempts)
				require.Equal(t, int64(77), c.Fence.LeaseID)
				require.Equal(t, "wf", c.Workflow, "what the handler sees of its task")
				require.JSONEq(t, `{"from":"a"}`, string(c.Deps["a"]), "its dependency's result")
			}
			woken := false
			select {
			case <-h.s.Wake():
				woken = true
			default:
			}
			// A store that hears other processes (Listener) also wakes
			// when the notification of an earlier write arrives, at any
			// time: only its wakes are certain.
			if _, hears := h.s.(store.Listener); !hears || tc.woken {
				require.Equal(t, tc.woken, woken, "engines woken")
			}
			// The rest is left to the claim.
			rest := h.claim("e1", 10)
			task := h.task(id)
			for _, st := range task.Steps {
				switch {
				case st.Name == "a":
					require.Equal(t, state.StepCompleted, st.State)
				default:
					require.Equal(t, state.StepRunning, st.State, st.Name)
				}
			}
			require.Len(t, append(claimed, rest...), len(tc.steps)-1)
			// The trail has each step's claim once, after its parent's end.
			trail, err := h.s.Audit(h.ctx, id)
			require.NoError(t, err)
			ended, seen := -1, map[string]int{}
			for i, e := range trail {
				if e.Step == "a" && e.To == string(state.StepCompleted) {
					ended = i
				}
				if e.Step != "a" && e.To == string(state.StepRunning) {
					seen[e.Step]++
					require.Greater(t, i, ended, "%s claimed after a ended", e.Step)
				}
			}
			for _, st := range task.Steps[1:] {
				require.Equal(t, 1, seen[st.Name], st.Name)
			}
		})
	}
	// Outcomes that made nothing ready, or arrive stale, claim nothing.
	h.insert(store.TaskInsert{Steps: chain("x")})
	x := h.claim("e1", 10)
	require.Len(t, x, 1)
	h.insert(store.TaskInsert{Steps: chain("y")})
	results, claimed, err := oc.CompleteAndClaim(h.ctx, []store.Outcome{{Fence: x[0].Fence, EngineID: "e1", State: state.StepCompleted}},
		store.ClaimParams{EngineID: "e1", Limit: 5})
	require.NoError(t, err)
	require.Equal(t, []error{nil}, results)
	require.Empty(t, claimed, "y was ready already: the claim loop takes it")
	results, claimed, err = oc.CompleteAndClaim(h.ctx, []store.Outcome{{Fence: x[0].Fence, EngineID: "e1", State: state.StepCompleted}},
		store.ClaimParams{EngineID: "e1", Limit: 5})
	require.NoError(t, err)
	require.ErrorIs(t, results[0], store.ErrStaleLease)
	require.Empty(t, claimed)
}

// testInsertAndClaim: inserting tasks claims the steps they start with
// ready in the same transaction, as a claim would, not their dependents;
// before any claim has read the policies, or with a first step under a key
// of a limit, it claims nothing and the claim takes them.
func testInsertAndClaim(t *testing.T, h *harness) {
	sc, ok := h.s.(store.SubmitClaimer)
	if !ok {
		t.Skip("the store does not claim with submissions")
	}
	steps := []store.StepInsert{{Name: "a", Handler: "h", MaxAttempts: 1}, {Name: "b", Handler: "h", MaxAttempts: 1},
		{Name: "join", Handler: "h", MaxAttempts: 1, Deps: []int{0, 1}}}
	insert := func(steps []store.StepInsert) ([]store.InsertResult, []store.ClaimedStep) {
		t.Helper()
		res, claimed, err := sc.InsertAndClaim(h.ctx, []store.TaskInsert{{Namespace: "ns", Workflow: "wf", Version: "1",
			Input: json.RawMessage(`{"n":1}`), Steps: steps}}, store.ClaimParams{EngineID: "e1", Limit: 5, LeaseID: 9})
		require.NoError(t, err)
		require.Len(t, res, 1)
		return res, claimed
	}
	_, claimed := insert(steps)
	require.Empty(t, claimed, "no claim has read the policies yet")
	require.ElementsMatch(t, []string{"a", "b"}, names(h.claim("e1", 10)))

	res, claimed := insert(steps)
	require.ElementsMatch(t, []string{"a", "b"}, names(claimed))
	for _, c := range claimed {
		require.Equal(t, state.StepRunning, c.State)
		require.Equal(t, int64(9), c.Fence.LeaseID)
		require.JSONEq(t, `{"n":1}`, string(c.Input), "what the handler sees of its task")
	}
	task := h.task(res[0].Task.ID)
	require.Equal(t, state.TaskRunning, task.State, "its first claimed step started the task")
	// The trail: the submission's entries, then the claims', by the engine.
	trail, err := h.s.Audit(h.ctx, task.ID)
	require.NoError(t, err)
	claims := 0
	for _, e := range trail {
		switch e.Reason {
		case "submitted":
			require.Empty(t, e.EngineID, "a submission is no engine's")
			require.Zero(t, claims, "submitted before claimed")
		case "claimed":
			require.Equal(t, "e1", e.EngineID)
			claims++
		}
	}
	require.Equal(t, 2, claims)
	require.Equal(t, map[string]state.Step{"a": state.StepRunning, "b": state.StepRunning, "join": state.StepPending}, states(task))
	require.Empty(t, h.claim("e1", 10))

	keyed := []store.StepInsert{{Name: "a", Handler: "h", MaxAttempts: 1, LimitKey: "k", Limit: 1}}
	_, claimed = insert(keyed)
	require.Empty(t, claimed, "a step under a key of a limit is left to the claim")
	require.Equal(t, []string{"a"}, names(h.claim("e1", 10)))
}

// testReadiedAndClaimedAgain: a run that ends ready (preempted, its
// attempt given back) and whose step the same transaction claims again
// records its own claim, the one that started the task, not the next.
func testReadiedAndClaimedAgain(t *testing.T, h *harness) {
	oc, ok := h.s.(store.OutcomeClaimer)
	if !ok {
		t.Skip("the store does not claim with outcomes")
	}
	id := h.insert(store.TaskInsert{Steps: []store.StepInsert{{Name: "a", Handler: "h", MaxAttempts: 3}}})[0].Task.ID
	first := h.claim("e1", 1)[0]
	h.drainWake()
	h.clock.Advance(time.Second)
	_, claimed, err := oc.CompleteAndClaim(h.ctx, []store.Outcome{{Fence: first.Fence, EngineID: "e1", State: state.StepReady, Snooze: true,
		Reason: "preempted"}}, store.ClaimParams{EngineID: "e1", Limit: 1, LeaseID: 78, Now: h.clock.Now()})
	require.NoError(t, err)
	require.Len(t, claimed, 1, "the step made ready is claimed again")
	h.ok(claimed[0], `{}`)
	trail, err := h.s.Audit(h.ctx, id)
	require.NoError(t, err)
	var claims []string
	starts := 0
	for _, e := range trail {
		switch {
		case e.Step == "" && e.To == string(state.TaskRunning):
			starts++
		case e.Step == "a" && e.To == string(state.StepRunning):
			claims = append(claims, e.At.UTC().Format(time.RFC3339))
		}
	}
	require.Equal(t, 1, starts, "the task started once: %v", trail)
	require.Len(t, claims, 2)
	require.NotEqual(t, claims[0], claims[1], "each run records its own claim: %v", trail)
}

// testResumeFunction: a call's outcome that carries what its function did
// next (store.Resume) makes the function step wait for the new call in the
// same transaction, which claims it; where the counts the engine replayed
// over are not the task's, the function step is left ready to run as
// usual.
func testResumeFunction(t *testing.T, h *harness) {
	oc, ok := h.s.(store.OutcomeClaimer)
	if !ok {
		t.Skip("the store does not claim with outcomes")
	}
	call := func(name string) store.StepInsert {
		return store.StepInsert{Name: name, Handler: "fn", Kind: store.KindCall, MaxAttempts: 1, Item: json.RawMessage(`{"call":"step"}`)}
	}
	for _, tc := range []struct {
		name      string
		recorded  int
		succeeded int
		returns   bool
		resumed   bool
	}{
		{"as replayed", 1, 1, false, true},
		{"a call the engine did not know of", 2, 1, false, false},
		{"a call that did not succeed", 1, 0, false, false},
		{"returned", 1, 1, true, true},
		{"returned over a call the engine did not know of", 2, 1, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := h.in(t)
			ns := "resume-" + strings.ReplaceAll(tc.name, " ", "-")
			id := h.insert(store.TaskInsert{Namespace: ns, Steps: []store.StepInsert{{Name: "function", Handler: "fn", Kind: store.KindFunction, MaxAttempts: 3}}})[0].Task.ID
			claim := func() store.ClaimedStep {
				got := h.claimWith(store.ClaimParams{EngineID: "e1", Limit: 1, Namespaces: []string{ns}})
				require.Len(t, got, 1)
				return got[0]
			}
			fn := claim()
			require.Equal(t, "function", fn.Name)
			require.Equal(t, []error{nil}, h.complete(store.Outcome{Fence: fn.Fence, EngineID: "e1", State: state.StepWaiting, Snooze: true,
				Calls: []store.StepInsert{call("one")}}))
			one := claim()
			require.Equal(t, "one", one.Name)
			h.drainWake()
			resume := &store.Resume{StepID: fn.ID, Calls: []store.StepInsert{call("two")}, Reason: "waiting for call(s) two",
				Recorded: tc.recorded, Succeeded: tc.succeeded}
			if tc.returns {
				resume = &store.Resume{StepID: fn.ID, Returned: true, Result: json.RawMessage(`{"total": 1}`), Recorded: tc.recorded, Succeeded: tc.succeeded}
			}
			results, claimed, err := oc.CompleteAndClaim(h.ctx, []store.Outcome{{Fence: one.Fence, EngineID: "e1", State: state.StepCompleted,
				Result: json.RawMessage(`1`), Resume: resume}}, store.ClaimParams{EngineID: "e1", Limit: 5, LeaseID: 79, Namespaces: []string{ns}})
			require.NoError(t, err)
			require.Equal(t, []error{nil}, results)
			task := h.task(id)
			if !tc.resumed {
				require.Equal(t, []string{"function"}, names(claimed), "the function step runs as usual")
				require.Len(t, task.Steps, 2, "no call was made")
				return
			}
			if tc.returns {
				require.Empty(t, claimed)
				require.Equal(t, state.TaskCompleted, task.State)
				require.Equal(t, state.StepCompleted, task.Steps[0].State)
				require.JSONEq(t, `{"total": 1}`, string(task.Steps[0].Result))
				require.Equal(t, 1, task.Steps[0].Attempts, "the run that returned is its first, under the call's claim")
				trail, err := h.s.Audit(h.ctx, id)
				require.NoError(t, err)
				var claims, ends int
				for _, e := range trail {
					switch {
					case e.Step == "function" && e.To == string(state.StepRunning):
						claims++
					case e.Step == "function" && e.From == string(state.StepRunning):
						ends++
					}
				}
				require.Equal(t, 2, claims, "%+v", trail)
				require.Equal(t, 2, ends, "%+v", trail)
				return
			}
			require.Equal(t, []string{"two"}, names(claimed), "the next call is claimed in the same transaction")
			require.Len(t, task.Steps, 3)
			require.Equal(t, state.StepWaiting, task.Steps[0].State)
			require.Equal(t, state.TaskRunning, task.State)
			h.ok(claimed[0], `2`)
			require.Equal(t, state.StepReady, h.task(id).Steps[0].State, "the function step runs once its new call ended")
		})
	}
}
