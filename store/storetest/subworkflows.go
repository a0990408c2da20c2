package storetest

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// Sub-workflows: a step that starts a child task and waits for it, the
// links both ways, the child's end carried to the waiting step, the
// cancellation of children, limits, and children started by handlers.

var subworkflowTests = []struct {
	name string
	fn   func(t *testing.T, h *harness)
}{
	{"ChildStartAndComplete", testChildComplete},
	{"ChildFailureReadiesStep", testChildFailure},
	{"ChildStartIsFenced", testChildStartFenced},
	{"CancelParentCancelsChildren", testCancelChildren},
	{"ChildLimits", testChildLimits},
	{"StartChildFromHandler", testStartChildFromHandler},
}

// parentSteps: "call" starts a child, "after" depends on it.
func parentSteps() []store.StepInsert {
	return []store.StepInsert{
		{Name: "call", Handler: "weft.workflow", Kind: store.KindWorkflow, MaxAttempts: 2},
		{Name: "after", Handler: "h", MaxAttempts: 1, Deps: []int{0}},
	}
}

// childInsert is a child task of two steps in a chain; "last" is its final
// step.
func childInsert(key string) store.TaskInsert {
	return store.TaskInsert{Namespace: "ns", Workflow: "child", Version: "1", Input: json.RawMessage(`{"n":2}`),
		IdempotencyKey: key, Steps: chain("first", "last")}
}

// startChild claims the parent's "call" step and starts a child from it.
func (h *harness) startChild(parent int64, key string, maxDepth, maxChildren int) (store.ClaimedStep, []error) {
	h.t.Helper()
	c := h.claimWith(store.ClaimParams{EngineID: "e1", Limit: 1, TaskID: parent})
	require.Len(h.t, c, 1)
	require.Equal(h.t, "call", c[0].Name)
	res := h.complete(store.Outcome{Fence: c[0].Fence, EngineID: "e1", State: state.StepWaiting,
		Child: &store.ChildStart{Task: childInsert(key), MaxDepth: maxDepth, MaxChildren: maxChildren}})
	return c[0], res
}

func testChildComplete(t *testing.T, h *harness) {
	parent := h.insert(store.TaskInsert{Steps: parentSteps()})[0].Task.ID
	claimed, res := h.startChild(parent, "child:a", 5, 10)
	require.NoError(t, res[0])
	p := h.task(parent)
	call := p.Steps[0]
	require.Equal(t, state.StepWaiting, call.State)
	require.Equal(t, claimed.Attempts, call.Attempts, "the child is the attempt")
	require.NotZero(t, call.ChildTaskID)
	require.Equal(t, []int64{call.ChildTaskID}, p.Children)
	child := h.task(call.ChildTaskID)
	require.Equal(t, parent, child.ParentTaskID)
	require.Equal(t, "call", child.ParentStep)
	require.Equal(t, 1, child.Depth)
	require.JSONEq(t, `{"n":2}`, string(child.Input))

	// The waiting step is neither promoted nor claimed; a claim limited to
	// the parent task takes the steps of its child too (weft run drives
	// the whole tree).
	_, err := h.s.Promote(h.ctx, h.clock.Now().Add(1000*3600*1e9), "e1")
	require.NoError(t, err)
	got := h.claimWith(store.ClaimParams{EngineID: "e1", Limit: 10, TaskID: parent})
	require.Equal(t, []string{"first"}, names(got))
	require.Equal(t, child.ID, got[0].TaskID)
	h.ok(got[0], `{}`)
	last := h.claimWith(store.ClaimParams{EngineID: "e1", Limit: 10, TaskID: child.ID})
	require.Equal(t, []string{"last"}, names(last))
	h.ok(last[0], `{"total":7}`)
	require.Equal(t, state.TaskCompleted, h.task(child.ID).State)
	p = h.task(parent)
	require.Equal(t, state.StepCompleted, p.Steps[0].State)
	require.JSONEq(t, `{"last":{"total":7}}`, string(p.Steps[0].Result), "the child's final steps' results by name")
	require.Equal(t, state.StepReady, p.Steps[1].State, "the parent's next step is ready in the same transaction")
	after := h.claimWith(store.ClaimParams{EngineID: "e1", Limit: 1, TaskID: parent})
	require.Len(t, after, 1)
	require.JSONEq(t, `{"last":{"total":7}}`, string(after[0].Deps["call"]))
}

func testChildFailure(t *testing.T, h *harness) {
	parent := h.insert(store.TaskInsert{Steps: parentSteps()})[0].Task.ID
	_, res := h.startChild(parent, "child:a", 5, 10)
	require.NoError(t, res[0])
	child := h.task(parent).Steps[0].ChildTaskID
	c := h.claimWith(store.ClaimParams{EngineID: "e1", Limit: 1, TaskID: child})
	require.Len(t, c, 1)
	require.NoError(t, h.complete(store.Outcome{Fence: c[0].Fence, EngineID: "e1", State: state.StepFailed, Error: "boom"})[0])
	require.Equal(t, state.TaskFailed, h.task(child).State)

	call := h.task(parent).Steps[0]
	require.Equal(t, state.StepReady, call.State, "the step runs again to report the failure under its retry policy")
	require.Contains(t, call.ChildError, "failed")
	require.Contains(t, call.ChildError, "boom")
	again := h.claimWith(store.ClaimParams{EngineID: "e1", Limit: 1, TaskID: parent})
	require.Len(t, again, 1)
	require.Equal(t, 1, again[0].Attempts, "the child's failure is reported by the attempt that started it")
	require.Equal(t, call.ChildError, again[0].ChildError, "the claim carries the child's failure")
	require.NoError(t, h.complete(store.Outcome{Fence: again[0].Fence, EngineID: "e1", State: state.StepWaiting,
		RunAt: h.clock.Now(), Error: again[0].ChildError, ChildConsumed: true})[0])
	call = h.task(parent).Steps[0]
	require.Empty(t, call.ChildError, "reported once")
	require.Equal(t, child, call.ChildTaskID, "the link stays until the next child")
}

// testChildStartFenced: an engine that lost its step (it stalled or
// crashed, and the step was taken over) cannot start a second child when
// its outcome arrives late; the holder's start is the only one.
func testChildStartFenced(t *testing.T, h *harness) {
	parent := h.insert(store.TaskInsert{Steps: parentSteps()})[0].Task.ID
	lost := h.claimWith(store.ClaimParams{EngineID: "e1", Limit: 1, TaskID: parent, LeaseID: 41})
	require.Len(t, lost, 1)
	n, err := h.s.ReleaseLease(h.ctx, "e1", 41)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	holder := h.claimWith(store.ClaimParams{EngineID: "e2", Limit: 1, TaskID: parent, LeaseID: 42})
	require.Len(t, holder, 1)
	require.NoError(t, h.complete(store.Outcome{Fence: holder[0].Fence, EngineID: "e2", State: state.StepWaiting,
		Child: &store.ChildStart{Task: childInsert("child:holder")}})[0])
	res := h.complete(store.Outcome{Fence: lost[0].Fence, EngineID: "e1", State: state.StepWaiting,
		Child: &store.ChildStart{Task: childInsert("child:lost")}})
	require.ErrorIs(t, res[0], store.ErrStaleLease)
	p := h.task(parent)
	require.Len(t, p.Children, 1, "one child, whoever reported")
	require.Equal(t, p.Children[0], p.Steps[0].ChildTaskID)
	require.Equal(t, "child:holder", h.task(p.Children[0]).IdempotencyKey)
}

func testCancelChildren(t *testing.T, h *harness) {
	parent := h.insert(store.TaskInsert{Steps: parentSteps()})[0].Task.ID
	_, res := h.startChild(parent, "child:a", 5, 10)
	require.NoError(t, res[0])
	child := h.task(parent).Steps[0].ChildTaskID
	// The child's first step runs, and the child starts a grandchild from
	// a step of its own kind.
	running := h.claimWith(store.ClaimParams{EngineID: "e1", Limit: 1, TaskID: child})
	require.Len(t, running, 1)

	fences, err := h.s.CancelTask(h.ctx, parent, "e1", "operator")
	require.NoError(t, err)
	require.Contains(t, fences, running[0].Fence, "the child's running step must stop")
	require.Equal(t, state.TaskCancelled, h.task(parent).State)
	ct := h.task(child)
	require.Equal(t, state.TaskCancelled, ct.State)
	require.Equal(t, map[string]state.Step{"first": state.StepCancelled, "last": state.StepCancelled}, states(ct))
	audit, err := h.s.Audit(h.ctx, child)
	require.NoError(t, err)
	found := false
	for _, a := range audit {
		if a.To == string(state.TaskCancelled) && a.Step == "" {
			require.Contains(t, a.Reason, "parent task")
			found = true
		}
	}
	require.True(t, found, "the child's audit says why: %+v", audit)
}

func testChildLimits(t *testing.T, h *harness) {
	// Fan-out: one child allowed per task.
	parent := h.insert(store.TaskInsert{Steps: []store.StepInsert{
		{Name: "call", Handler: "weft.workflow", Kind: store.KindWorkflow, MaxAttempts: 1},
		{Name: "call2", Handler: "weft.workflow", Kind: store.KindWorkflow, MaxAttempts: 1},
	}})[0].Task.ID
	c := h.claimWith(store.ClaimParams{EngineID: "e1", Limit: 2, TaskID: parent})
	require.Len(t, c, 2)
	for i, want := range []state.Step{state.StepWaiting, state.StepFailed} {
		require.NoError(t, h.complete(store.Outcome{Fence: c[i].Fence, EngineID: "e1", State: state.StepWaiting,
			Child: &store.ChildStart{Task: childInsert(""), MaxDepth: 5, MaxChildren: 1}})[0])
		st := h.task(parent).Steps[c[i].Index]
		require.Equal(t, want, st.State, "step %s", st.Name)
		if want == state.StepFailed {
			require.Contains(t, st.Error, "max_children")
		}
	}
	require.Len(t, h.task(parent).Children, 1)

	// Depth: a child may not start a child of its own with max depth 1.
	p2 := h.insert(store.TaskInsert{Steps: parentSteps()})[0].Task.ID
	_, res := h.startChild(p2, "", 1, 10)
	require.NoError(t, res[0])
	child := h.task(p2).Steps[0].ChildTaskID
	// The child's own first step starts a grandchild through StartChild.
	cs := h.claimWith(store.ClaimParams{EngineID: "e1", Limit: 1, TaskID: child})
	require.Len(t, cs, 1)
	_, err := h.s.StartChild(h.ctx, cs[0].Fence, store.ChildStart{Task: childInsert("grand"), MaxDepth: 1})
	require.ErrorIs(t, err, store.ErrConflict)
	require.Contains(t, err.Error(), "max_depth")
	g, err := h.s.StartChild(h.ctx, cs[0].Fence, store.ChildStart{Task: childInsert("grand"), MaxDepth: 2})
	require.NoError(t, err)
	require.Equal(t, 2, g.Task.Depth)
}

func testStartChildFromHandler(t *testing.T, h *harness) {
	parent := h.insert(store.TaskInsert{Steps: chain("work")})[0].Task.ID
	c := h.claimWith(store.ClaimParams{EngineID: "e1", Limit: 1, TaskID: parent})
	require.Len(t, c, 1)
	first, err := h.s.StartChild(h.ctx, c[0].Fence, store.ChildStart{Task: childInsert("child:work/a")})
	require.NoError(t, err)
	require.False(t, first.Duplicate)
	require.Equal(t, parent, first.Task.ParentTaskID)
	// The same key again (a handler run again after a crash) finds it.
	again, err := h.s.StartChild(h.ctx, c[0].Fence, store.ChildStart{Task: childInsert("child:work/a")})
	require.NoError(t, err)
	require.True(t, again.Duplicate)
	require.Equal(t, first.Task.ID, again.Task.ID)
	got := h.task(first.Task.ID)
	require.Equal(t, "work", got.ParentStep)
	require.Equal(t, []int64{first.Task.ID}, h.task(parent).Children)

	stale := c[0].Fence
	stale.Attempt++
	_, err = h.s.StartChild(h.ctx, stale, store.ChildStart{Task: childInsert("child:work/b")})
	require.ErrorIs(t, err, store.ErrStaleLease)
	// The parent step does not wait for a child its handler started.
	h.ok(c[0], `{}`)
	require.Equal(t, state.TaskCompleted, h.task(parent).State)
}
