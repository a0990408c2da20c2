// Package storetest is the conformance suite every store.Store passes: the
// same behaviour tests run against each backend, so a behaviour that exists
// on one backend only is caught.
//
// A backend's test calls Run with a function that opens a fresh, empty store
// whose clock the suite controls.
package storetest

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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
		{"CloseTwice", testCloseTwice},
		{"ManySteps", testManySteps},
		{"Idempotency", testIdempotency},
		{"BulkInsertIsAtomic", testBulkInsertAtomic},
		{"ClaimLimitAndFence", testClaimLimit},
		{"ClaimedStepIsItsRow", testClaimedStepIsItsRow},
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
		{"ClaimBesideReap", testClaimBesideReap},
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
		{"ListActive", testListActive},
		{"AuditRecordsEveryTransition", testAudit},
		{"AuditOfStepsClaimedTogether", testAuditClaimedTogether},
		{"APIKeys", testAPIKeys},
		{"Sessions", testSessions},
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
	tests = append(tests, signalTests...)
	tests = append(tests, runningTests...)
	tests = append(tests, opsTests...)
	tests = append(tests, historyTests...)
	tests = append(tests, webhookTests...)
	tests = append(tests, scheduleTests...)
	tests = append(tests, subworkflowTests...)
	tests = append(tests, supersedeTests...)
	tests = append(tests, contentionTests...)
	tests = append(tests, submitTests...)
	tests = append(tests, policyTests...)
	tests = append(tests, fairTests...)
	tests = append(tests, rateTests...)
	tests = append(tests, breakerTests...)
	tests = append(tests, statsTests...)
	tests = append(tests, preemptionTests...)
	tests = append(tests, outcomeClaimTests...)
	tests = append(tests, retryKindTests...)
	tests = append(tests, idTests...)
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

// in returns the harness for subtest t of h's test: same store and clock.
func (h *harness) in(t *testing.T) *harness {
	sub := *h
	sub.t = t
	return &sub
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

// beginWait claims the ready signal step named name of task id and records
// the outcome with which an engine begins its wait.
func (h *harness) beginWait(id int64, name string) {
	h.t.Helper()
	c := h.claimNext(id, name)
	require.Equal(h.t, store.KindSignal, c.Kind)
	require.Equal(h.t, store.SignalHandler, c.Handler)
	require.NoError(h.t, h.complete(waitOutcome(c))[0])
}

// waitOutcome is the outcome with which an engine begins the wait of the
// claimed signal step c.
func waitOutcome(c store.ClaimedStep) store.Outcome {
	return store.Outcome{Fence: c.Fence, EngineID: "e1", State: state.StepWaiting, BeginWait: true}
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
