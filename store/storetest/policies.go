package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/store"
)

// policyTests are the conformance tests of the scheduling policies held in
// the database: pauses, namespace limits and concurrency keys.
var policyTests = []struct {
	name string
	fn   func(t *testing.T, h *harness)
}{
	{"PolicyChangesAreValidated", testPolicyValidation},
	{"PauseAndResume", testPauseResume},
	{"NamespaceLimitInDatabase", testNamespaceLimit},
	{"StepLimitKeys", testStepLimitKeys},
	{"WorkflowLimitCountsTasks", testWorkflowLimit},
	{"LimitsHoldUnderConcurrentClaims", testLimitsConcurrent},
	{"LimitKeysBelongToTheirNamespace", testLimitKeysPerNamespace},
	{"LimitsNearTheirBoundAreCounted", testLimitsNearBound},
	{"WorkflowLimitAdmitsATaskOnce", testWorkflowLimitRoots},
	{"WorkflowLimitHoldsAcrossRounds", testWorkflowLimitRounds},
	{"PoliciesHoldAfterAFullClaim", testPoliciesAfterFullClaim},
	{"LimitsHoldAfterAFullClaim", testLimitsAfterFullClaim},
}

func ptr[T any](v T) *T { return &v }

func (h *harness) setPolicy(c store.PolicyChange) store.Policy {
	h.t.Helper()
	if c.Actor == "" {
		c.Actor = "test:operator"
	}
	p, err := h.s.SetPolicy(h.ctx, c)
	require.NoError(h.t, err)
	return p
}

// claimedNamespaces counts claimed steps by namespace/workflow.
func claimedWorkflows(cs []store.ClaimedStep) map[string]int {
	out := map[string]int{}
	for _, c := range cs {
		out[c.Namespace+"/"+c.Workflow]++
	}
	return out
}

func testPolicyValidation(t *testing.T, h *harness) {
	for _, tt := range []struct {
		name string
		c    store.PolicyChange
		want string
	}{
		{"empty target", store.PolicyChange{Paused: ptr(true), Actor: "a"}, "empty"},
		{"version", store.PolicyChange{Target: "shop/checkout@1", Paused: ptr(true), Actor: "a"}, "no version"},
		{"too deep", store.PolicyChange{Target: "shop/a/b", Paused: ptr(true), Actor: "a"}, "want NAMESPACE"},
		{"bad name", store.PolicyChange{Target: "sh op", Paused: ptr(true), Actor: "a"}, "letters, digits"},
		{"nothing", store.PolicyChange{Target: "shop", Actor: "a"}, "sets nothing"},
		{"no actor", store.PolicyChange{Target: "shop", Paused: ptr(true)}, "actor"},
		{"limit on workflow", store.PolicyChange{Target: "shop/checkout", Concurrency: ptr(2), Actor: "a"}, "set on a namespace"},
		{"limit on all", store.PolicyChange{Target: store.TargetAll, Concurrency: ptr(2), Actor: "a"}, "set on a namespace"},
		{"negative limit", store.PolicyChange{Target: "shop", Concurrency: ptr(-1), Actor: "a"}, "0 (no limit) or more"},
	} {
		_, err := h.s.SetPolicy(h.ctx, tt.c)
		require.ErrorIs(t, err, store.ErrInvalid, tt.name)
		require.ErrorContains(t, err, tt.want, tt.name)
	}
	changes, err := h.s.PolicyChanges(h.ctx, 0)
	require.NoError(t, err)
	require.Empty(t, changes, "a refused change is not recorded")
}

func testPauseResume(t *testing.T, h *harness) {
	for range 2 {
		h.insert(store.TaskInsert{Namespace: "shop", Workflow: "checkout", Version: "1"},
			store.TaskInsert{Namespace: "shop", Workflow: "refund", Version: "1"},
			store.TaskInsert{Namespace: "other", Workflow: "wf", Version: "1"})
	}
	p := h.setPolicy(store.PolicyChange{Target: "shop/checkout", Paused: ptr(true), Actor: "cli:alice", Reason: "bad deploy"})
	require.True(t, p.Paused)
	require.Equal(t, "cli:alice", p.UpdatedBy)
	h.setPolicy(store.PolicyChange{Target: "other", Paused: ptr(true)})
	require.Equal(t, map[string]int{"shop/refund": 2}, claimedWorkflows(h.claim("e1", 10)),
		"a paused workflow and a paused namespace are not claimed")

	h.setPolicy(store.PolicyChange{Target: store.TargetAll, Paused: ptr(true)})
	h.setPolicy(store.PolicyChange{Target: "other", Paused: ptr(false)})
	require.Empty(t, h.claim("e1", 10), "all is paused")
	h.setPolicy(store.PolicyChange{Target: store.TargetAll, Paused: ptr(false)})
	require.Equal(t, map[string]int{"other/wf": 2}, claimedWorkflows(h.claim("e1", 10)))

	r, err := h.s.ListPolicies(h.ctx)
	require.NoError(t, err)
	require.Len(t, r.Policies, 1, "resumed targets with nothing else set are forgotten")
	require.Equal(t, "shop/checkout", r.Policies[0].Target)
	require.True(t, r.Policies[0].Paused)

	h.setPolicy(store.PolicyChange{Target: "shop/checkout", Paused: ptr(false), Actor: "api:bob"})
	require.Equal(t, map[string]int{"shop/checkout": 2}, claimedWorkflows(h.claim("e1", 10)))

	changes, err := h.s.PolicyChanges(h.ctx, 0)
	require.NoError(t, err)
	require.Len(t, changes, 6)
	require.Equal(t, "api:bob", changes[0].Actor, "newest first")
	require.Equal(t, "resume", changes[0].Change)
	last := changes[len(changes)-1]
	require.True(t, h.clock.Now().Equal(last.At), last.At)
	last.At = time.Time{}
	require.Equal(t, store.PolicyChangeRecord{ID: last.ID, Actor: "cli:alice", Target: "shop/checkout", Change: "pause", Reason: "bad deploy"}, last)
}

func testNamespaceLimit(t *testing.T, h *harness) {
	for range 5 {
		h.insert(store.TaskInsert{Namespace: "capped"}, store.TaskInsert{Namespace: "free"})
	}
	h.setPolicy(store.PolicyChange{Target: "capped", Concurrency: ptr(2)})
	got := h.claim("e1", 10)
	require.Equal(t, map[string]int{"capped/wf": 2, "free/wf": 5}, claimedWorkflows(got))
	require.Empty(t, h.claim("e2", 10), "the limit counts the running steps of every engine")
	r, err := h.s.ListPolicies(h.ctx)
	require.NoError(t, err)
	require.Len(t, r.Policies, 1)
	require.Equal(t, 2, r.Policies[0].Concurrency)
	require.Equal(t, 2, r.Policies[0].Running)
	for _, c := range got {
		if c.Namespace == "capped" {
			h.ok(c, `{}`)
			break
		}
	}
	// An engine's own cap and the database's: the smaller holds.
	require.Empty(t, h.claimWith(store.ClaimParams{EngineID: "e2", Limit: 10, Caps: map[string]int{"capped": 1}}))
	require.Len(t, h.claim("e2", 10), 1)
	// Raising the limit lets more run at once; 0 removes it.
	h.setPolicy(store.PolicyChange{Target: "capped", Concurrency: ptr(0)})
	require.Len(t, h.claim("e2", 10), 2)
}

// testPoliciesAfterFullClaim: a claim that follows one that took every
// step it asked for (under such a backlog SQLite tries to claim in one
// statement) still holds steps to their keys' limits and sees a pause
// made since.
func testPoliciesAfterFullClaim(t *testing.T, h *harness) {
	h.insert(store.TaskInsert{}, store.TaskInsert{})
	require.Len(t, h.claim("e1", 2), 2)
	for range 3 {
		h.insert(store.TaskInsert{Steps: []store.StepInsert{{Name: "charge", Handler: "h", MaxAttempts: 1, LimitKey: "step:k", Limit: 1}}})
	}
	got := h.claim("e1", 10)
	require.Len(t, got, 1, "one step of the key at a time")
	require.Equal(t, "charge", got[0].Name)

	h.insert(store.TaskInsert{}, store.TaskInsert{})
	require.Len(t, h.claim("e1", 2), 2, "the steps behind the full key")
	h.setPolicy(store.PolicyChange{Target: "ns", Paused: ptr(true)})
	h.insert(store.TaskInsert{})
	require.Empty(t, h.claim("e1", 10), "ns is paused")
}

// testLimitsAfterFullClaim: after a claim that took every step it asked
// for (SQLite then claims in one statement, counting what runs in its
// gate), a namespace's own limit and a workflow limit still hold where
// what runs in the namespace alone would let the claim take more: under
// a namespace limit of 3 with 2 running, 1 of 4 ready steps; under a
// workflow limit of 3 with 2 tasks running and no step, 1 of 2 tasks
// starts.
func testLimitsAfterFullClaim(t *testing.T, h *harness) {
	h.setPolicy(store.PolicyChange{Target: "capped", Concurrency: ptr(3)})
	for range 6 {
		h.insert(store.TaskInsert{Namespace: "capped"})
	}
	require.Len(t, h.claim("e1", 2), 2)
	require.Len(t, h.claim("e1", 10), 1, "the namespace's limit")

	limited := func() store.TaskInsert {
		return store.TaskInsert{Namespace: "wf", LimitKey: "workflow:wf/wf", Limit: 3, Steps: []store.StepInsert{
			{Name: "a", Handler: "h", MaxAttempts: 1},
			{Name: "wait", Kind: store.KindSignal, Signal: "go", Deps: []int{0}}}}
	}
	h.insert(limited(), limited())
	started := h.claimWith(store.ClaimParams{EngineID: "e1", Limit: 2, Namespaces: []string{"wf"}})
	require.Len(t, started, 2)
	for _, c := range started {
		h.ok(c, `{}`)
		h.beginWait(c.TaskID, "wait")
	}
	h.insert(limited(), limited(), store.TaskInsert{Namespace: "free"}, store.TaskInsert{Namespace: "free"})
	require.Len(t, h.claimWith(store.ClaimParams{EngineID: "e1", Limit: 2, Namespaces: []string{"free"}}), 2)
	got := h.claimWith(store.ClaimParams{EngineID: "e1", Limit: 10, Namespaces: []string{"wf"}})
	require.Len(t, got, 1, "one place left under the workflow limit: two tasks run, their steps ended")
}

func testStepLimitKeys(t *testing.T, h *harness) {
	keyed := func(key string) store.TaskInsert {
		return store.TaskInsert{Steps: []store.StepInsert{{Name: "charge", Handler: "h", MaxAttempts: 1, LimitKey: key, Limit: 1}}}
	}
	// Keyed steps first, so that they lead the ready queue.
	for range 4 {
		h.insert(keyed("step:ns/wf/charge=alice"))
	}
	h.insert(keyed("step:ns/wf/charge=bob"))
	for range 3 {
		h.insert(store.TaskInsert{})
	}
	got := h.claim("e1", 5)
	count := map[string]int{}
	for _, c := range got {
		count[c.Name]++
	}
	require.Equal(t, map[string]int{"charge": 2, "only": 3}, count,
		"one per key, and the steps behind a full key are reached in the same claim")
	require.Empty(t, h.claim("e2", 10))

	r, err := h.s.ListPolicies(h.ctx)
	require.NoError(t, err)
	require.Equal(t, []store.LimitUsage{{Key: "step:ns/wf/charge=alice", Limit: 1, Running: 1}, {Key: "step:ns/wf/charge=bob", Limit: 1, Running: 1}}, r.Limits)

	for _, c := range got {
		if c.Name == "charge" {
			h.ok(c, `{}`)
		}
	}
	require.Len(t, h.claim("e2", 10), 1, "alice's next; bob has none left")

	_, err = h.s.InsertTasks(h.ctx, []store.TaskInsert{{Namespace: "ns", Workflow: "wf", Version: "1",
		Steps: []store.StepInsert{{Name: "x", Handler: "h", LimitKey: "k"}}}})
	require.ErrorIs(t, err, store.ErrInvalidInsert, "a key needs a limit")
}

func testWorkflowLimit(t *testing.T, h *harness) {
	var ids []int64
	for range 3 {
		ids = append(ids, h.insert(store.TaskInsert{Steps: chain("a", "b"), LimitKey: "workflow:ns/wf", Limit: 1})[0].Task.ID)
	}
	a := h.claim("e1", 10)
	require.Len(t, a, 1, "one task at a time")
	require.Equal(t, ids[0], a[0].TaskID)
	h.ok(a[0], `{}`)
	b := h.claim("e1", 10)
	require.Len(t, b, 1, "the running task goes on; the others wait")
	require.Equal(t, "b", b[0].Name)
	require.Equal(t, ids[0], b[0].TaskID)

	r, err := h.s.ListPolicies(h.ctx)
	require.NoError(t, err)
	require.Equal(t, []store.LimitUsage{{Key: "workflow:ns/wf", Limit: 1, Running: 1}}, r.Limits)

	h.ok(b[0], `{}`)
	next := h.claim("e1", 10)
	require.Len(t, next, 1, "the task ended: the next starts")
	require.Equal(t, ids[1], next[0].TaskID)
}

// testLimitsConcurrent claims from many goroutines at once: a limit of 1
// (a key, a workflow, a namespace) is never exceeded.
func testLimitsConcurrent(t *testing.T, h *harness) {
	for i := range 10 {
		h.insert(store.TaskInsert{Namespace: "keyed", Steps: []store.StepInsert{{Name: "s", Handler: "h", MaxAttempts: 1, LimitKey: "step:k", Limit: 1}}},
			store.TaskInsert{Namespace: "tasks", Steps: chain("a", "b"), LimitKey: "workflow:w", Limit: 1},
			store.TaskInsert{Namespace: fmt.Sprintf("limited%d", i%2)})
	}
	h.setPolicy(store.PolicyChange{Target: "limited0", Concurrency: ptr(1)})
	h.setPolicy(store.PolicyChange{Target: "limited1", Concurrency: ptr(1)})
	var mu sync.Mutex
	var all []store.ClaimedStep
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			engine := fmt.Sprintf("e%d", g)
			for range 5 {
				got, err := h.s.ClaimSteps(h.ctx, store.ClaimParams{EngineID: engine, Limit: 3})
				if err != nil && !errors.Is(err, store.ErrUnavailable) {
					t.Errorf("claim: %v", err)
					return
				}
				mu.Lock()
				all = append(all, got...)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	require.Equal(t, map[string]int{"keyed/wf": 1, "tasks/wf": 1, "limited0/wf": 1, "limited1/wf": 1}, claimedWorkflows(all))
}

// testLimitKeysPerNamespace: the same key in two namespaces is two limits.
func testLimitKeysPerNamespace(t *testing.T, h *harness) {
	for _, ns := range []string{"a", "b"} {
		for range 2 {
			h.insert(store.TaskInsert{Namespace: ns, Steps: []store.StepInsert{{Name: "s", Handler: "h", MaxAttempts: 1, LimitKey: "step:k", Limit: 1}}},
				store.TaskInsert{Namespace: ns, Workflow: "w", Version: "1", LimitKey: "workflow:w", Limit: 1})
		}
	}
	got := h.claim("e1", 20)
	require.Equal(t, map[string]int{"a/wf": 1, "a/w": 1, "b/wf": 1, "b/w": 1}, claimedWorkflows(got),
		"one step under each key and one task under each workflow key, in each namespace")
	require.Empty(t, h.claim("e2", 20))
}

// testLimitsNearBound: a limit the running work of its namespace may
// reach is counted on its own, and holds exactly, whether the namespace
// runs much or little besides.
func testLimitsNearBound(t *testing.T, h *harness) {
	busy := make([]store.TaskInsert, 5)
	for i := range busy {
		busy[i] = store.TaskInsert{Namespace: "busy"}
	}
	h.insert(busy...)
	require.Len(t, h.claim("e1", 5), 5, "five unlimited steps run in the namespace")
	keyed := func(limit int) store.TaskInsert {
		return store.TaskInsert{Namespace: "busy", Steps: []store.StepInsert{{Name: "k", Handler: "h", MaxAttempts: 1, LimitKey: "step:busy/k", Limit: limit}}}
	}
	for range 4 {
		h.insert(keyed(3))
	}
	require.Len(t, h.claim("e1", 2), 2, "nothing runs under the key: room for both, though the namespace runs five")
	require.Len(t, h.claim("e1", 2), 1, "one place left")
	require.Empty(t, h.claim("e1", 2), "full")

	// A limit far above what runs is not counted on its own, and takes
	// what the claim asks for.
	for range 6 {
		h.insert(store.TaskInsert{Namespace: "busy", Steps: []store.StepInsert{{Name: "far", Handler: "h", MaxAttempts: 1, LimitKey: "step:busy/far", Limit: 1000}}})
	}
	require.Len(t, h.claim("e1", 10), 6)

	// Between the two, the key is counted on its own too: 14 steps run in
	// the namespace, none under the key.
	for range 8 {
		h.insert(store.TaskInsert{Namespace: "busy", Steps: []store.StepInsert{{Name: "mid", Handler: "h", MaxAttempts: 1, LimitKey: "step:busy/mid", Limit: 20}}})
	}
	require.Len(t, h.claim("e1", 10), 8)
}

// testWorkflowLimitRoots: a task whose steps start apart takes one place
// under its workflow limit, near the limit and far below it.
func testWorkflowLimitRoots(t *testing.T, h *harness) {
	for _, tt := range []struct {
		ns    string
		limit int
	}{{"near", 1}, {"far", 1000}} {
		roots := []store.StepInsert{{Name: "a", Handler: "h", MaxAttempts: 1}, {Name: "b", Handler: "h", MaxAttempts: 1}}
		first := h.insert(store.TaskInsert{Namespace: tt.ns, Steps: roots, LimitKey: "workflow:" + tt.ns + "/wf", Limit: tt.limit})[0].Task.ID
		a := h.claim("e1", 1)
		require.Len(t, a, 1, tt.ns)
		require.Equal(t, first, a[0].TaskID, tt.ns)
		b := h.claim("e1", 1)
		require.Len(t, b, 1, "%s: the started task's other step needs no second place", tt.ns)
		require.Equal(t, first, b[0].TaskID, tt.ns)
		require.NotEqual(t, a[0].Name, b[0].Name, tt.ns)
		h.ok(a[0], `{}`)
		h.ok(b[0], `{}`)
	}
	// Near the limit, the steps of tasks that would start take their
	// places, one per task.
	for range 3 {
		h.insert(store.TaskInsert{Namespace: "two", Steps: []store.StepInsert{{Name: "a", Handler: "h", MaxAttempts: 1}, {Name: "b", Handler: "h", MaxAttempts: 1}},
			LimitKey: "workflow:two/wf", Limit: 2})
	}
	got := h.claim("e1", 10)
	tasks := map[int64]int{}
	for _, c := range got {
		tasks[c.TaskID]++
	}
	require.Len(t, tasks, 2, "two tasks start")
	for id, n := range tasks {
		require.Equal(t, 2, n, "both steps of task %d", id)
	}
}

// testWorkflowLimitRounds: a claim whose first round fills a step limit
// and reaches further in a second round still counts the tasks it starts
// there under the workflow limit it met in the first.
func testWorkflowLimitRounds(t *testing.T, h *harness) {
	both := store.TaskInsert{Namespace: "r", LimitKey: "workflow:r/wf", Limit: 2,
		Steps: []store.StepInsert{{Name: "s", Handler: "h", MaxAttempts: 1, LimitKey: "step:r/wf/s", Limit: 1}}}
	plain := store.TaskInsert{Namespace: "r", LimitKey: "workflow:r/wf", Limit: 2}
	h.insert(both, both, both, both, plain, plain, plain)
	got := h.claim("e1", 4)
	tasks := map[int64]bool{}
	for _, c := range got {
		tasks[c.TaskID] = true
	}
	require.Len(t, tasks, 2, "two tasks under the workflow limit, one of them under the step limit")
	require.Empty(t, h.claim("e1", 4))
}
