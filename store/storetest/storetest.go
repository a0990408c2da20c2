// Package storetest is the conformance suite every store.Store passes: the
// same behaviour tests run against each backend, so a behaviour that exists
// on one backend only is caught.
//
// A backend's test calls Run with a function that opens a fresh, empty store
// whose clock the suite controls.
package storetest

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/internal/dag"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// Clock is a settable time source for a store under test.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock at a fixed instant.
func NewClock() *Clock { return &Clock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

// Advance moves the clock forward.
func (c *Clock) Advance(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

// Opener opens a fresh, empty store that reads the time from clock and
// ages priorities by one level per aging.
type Opener func(t *testing.T, clock *Clock, aging time.Duration) store.Store

// Run runs every conformance test against the stores open returns.
func Run(t *testing.T, open Opener) {
	tests := []struct {
		name string
		fn   func(t *testing.T, h *harness)
	}{
		{"InsertAndGet", testInsertAndGet},
		{"ManySteps", testManySteps},
		{"Idempotency", testIdempotency},
		{"BulkInsertIsAtomic", testBulkInsertAtomic},
		{"ClaimLimitAndFence", testClaimLimit},
		{"ClaimByHandler", testClaimByHandler},
		{"PriorityAging", testPriorityAging},
		{"NamespaceCaps", testNamespaceCaps},
		{"DiamondReadiness", testDiamondReadiness},
		{"DependencyResultsAsStored", testDependencyResults},
		{"ParentsEndingTogether", testParentsEndingTogether},
		{"FailureSkipsDescendants", testFailureSkipsDescendants},
		{"RetryWaitsThenPromotes", testRetryWaits},
		{"SnoozeGivesAttemptBack", testSnooze},
		{"StaleCompletionRefused", testStaleCompletion},
		{"ReapLapsedEngine", testReap},
		{"ReleaseLease", testReleaseLease},
		{"LeaderElection", testLeaderElection},
		{"WorkerOwner", testWorkerOwner},
		{"ReapExhaustedFails", testReapExhausted},
		{"HeartbeatReportsLost", testHeartbeatLost},
		{"CheckpointAndDeferredAreFenced", testCheckpointDeferred},
		{"CancelTask", testCancel},
		{"RetryTask", testRetryTask},
		{"ExpireStepTTL", testExpireTTL},
		{"ExpireGoodUntil", testExpireGoodUntil},
		{"RunAtDelaysTask", testRunAt},
		{"Workflows", testWorkflows},
		{"ListTasks", testListTasks},
		{"AuditRecordsEveryTransition", testAudit},
		{"AuditOfStepsClaimedTogether", testAuditClaimedTogether},
		{"APIKeys", testAPIKeys},
		{"GetStep", testGetStep},
		{"RetryStepReopensSkipped", testRetryStep},
		{"RetryStepKeepsOtherFailures", testRetryStepOtherFailure},
		{"ResolveFailedStep", testResolveFailed},
		{"ResolveWithResult", testResolveWithResult},
		{"ResolveRefused", testResolveRefused},
		{"QueueDepth", testQueueDepth},
		{"CountUnfinishedTasks", testCountUnfinished},
		{"ClaimByNamespace", testClaimByNamespace},
		{"ListTasksByCreationTime", testListTasksByTime},
		{"TraceParentAndReadyAt", testTraceParentAndReadyAt},
	}
	tests = append(tests, dynamicTests...)
	tests = append(tests, runningTests...)
	tests = append(tests, opsTests...)
	tests = append(tests, historyTests...)
	tests = append(tests, webhookTests...)
	tests = append(tests, scheduleTests...)
	tests = append(tests, subworkflowTests...)
	tests = append(tests, supersedeTests...)
	tests = append(tests, submitTests...)
	tests = append(tests, policyTests...)
	tests = append(tests, fairTests...)
	tests = append(tests, rateTests...)
	tests = append(tests, breakerTests...)
	tests = append(tests, statsTests...)
	tests = append(tests, preemptionTests...)
	tests = append(tests, outcomeClaimTests...)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			clock := NewClock()
			h := &harness{t: t, clock: clock, s: open(t, clock, 10*time.Second), ctx: context.Background()}
			tt.fn(t, h)
		})
	}
}

type harness struct {
	t     *testing.T
	clock *Clock
	s     store.Store
	ctx   context.Context
}

// chain builds steps where each depends on the one before.
func chain(names ...string) []store.StepInsert {
	out := make([]store.StepInsert, len(names))
	for i, n := range names {
		out[i] = store.StepInsert{Name: n, Handler: "h", MaxAttempts: 3}
		if i > 0 {
			out[i].Deps = []int{i - 1}
		}
	}
	return out
}

func (h *harness) insert(in ...store.TaskInsert) []store.InsertResult {
	h.t.Helper()
	for i := range in {
		if in[i].Namespace == "" {
			in[i].Namespace = "ns"
		}
		if in[i].Workflow == "" {
			in[i].Workflow, in[i].Version = "wf", "1"
		}
		if in[i].Steps == nil {
			in[i].Steps = chain("only")
		}
	}
	res, err := h.s.InsertTasks(h.ctx, in)
	require.NoError(h.t, err)
	return res
}

func (h *harness) claim(engine string, limit int) []store.ClaimedStep {
	h.t.Helper()
	return h.claimWith(store.ClaimParams{EngineID: engine, Limit: limit})
}

func (h *harness) claimWith(p store.ClaimParams) []store.ClaimedStep {
	h.t.Helper()
	p.Now = h.clock.Now()
	got, err := h.s.ClaimSteps(h.ctx, p)
	require.NoError(h.t, err)
	return got
}

func (h *harness) complete(os ...store.Outcome) []error {
	h.t.Helper()
	res, err := h.s.CompleteSteps(h.ctx, os)
	require.NoError(h.t, err)
	return res
}

func (h *harness) ok(c store.ClaimedStep, result string) {
	h.t.Helper()
	res := h.complete(store.Outcome{Fence: c.Fence, EngineID: "e1", State: state.StepCompleted, Result: json.RawMessage(result)})
	require.NoError(h.t, res[0])
}

func (h *harness) task(id int64) *store.Task {
	h.t.Helper()
	task, err := h.s.GetTask(h.ctx, id)
	require.NoError(h.t, err)
	return task
}

func (h *harness) register(id string) {
	h.t.Helper()
	require.NoError(h.t, h.s.RegisterEngine(h.ctx, store.EngineInfo{ID: id, Host: "test-host", PID: 1, StartedAt: h.clock.Now()}))
}

func states(task *store.Task) map[string]state.Step {
	out := map[string]state.Step{}
	for _, s := range task.Steps {
		out[s.Name] = s.State
	}
	return out
}

func names(cs []store.ClaimedStep) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.Name
	}
	return out
}

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
