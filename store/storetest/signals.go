package storetest

import (
	"encoding/json"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// signalTests are durable waits for signals: a signal step is claimed like
// any step, with store.SignalHandler, and its outcome begins the wait.
var signalTests = []struct {
	name string
	fn   func(t *testing.T, h *harness)
}{
	{"SignalAfterWait", testSignalAfterWait},
	{"SignalBeforeWait", testSignalBeforeWait},
	{"SignalWaitTimesOut", testSignalTimeout},
	{"SignalRefused", testSignalRefused},
	{"SignalWaitStartsItsTask", testSignalWaitStartsTask},
	{"SignalBesideWaitStart", testSignalBesideWaitStart},
}

func signalTask(h *harness, timeout time.Duration) int64 {
	return h.insert(store.TaskInsert{Steps: []store.StepInsert{
		{Name: "before", Handler: "h", MaxAttempts: 1},
		{Name: "approval", Kind: store.KindSignal, Signal: "approve", SignalTimeout: timeout, MaxAttempts: 1, Deps: []int{0}},
		{Name: "after", Handler: "h", MaxAttempts: 1, Deps: []int{1}},
	}})[0].Task.ID
}

func testSignalAfterWait(t *testing.T, h *harness) {
	id := signalTask(h, 0)
	h.ok(h.claim("e1", 10)[0], `{}`)
	task := h.task(id)
	require.Equal(t, state.StepReady, task.Steps[1].State, "the wait begins when an engine claims the step")
	h.beginWait(id, "approval")
	task = h.task(id)
	approval := task.Steps[1]
	require.Equal(t, state.StepWaiting, approval.State)
	require.Zero(t, approval.Attempts, "the claim that began the wait gave its attempt back")
	require.Equal(t, "approve", approval.Signal)
	require.Nil(t, approval.RunAt, "no timeout, no deadline")
	require.Empty(t, h.claim("e1", 10), "a waiting signal step is never claimed")
	delivered, err := h.s.Signal(h.ctx, id, "approve", json.RawMessage(`{"by":"ada"}`), "")
	require.NoError(t, err)
	require.True(t, delivered)
	task = h.task(id)
	require.Equal(t, state.StepCompleted, task.Steps[1].State)
	require.JSONEq(t, `{"signal":"approve","payload":{"by":"ada"}}`, string(task.Steps[1].Result))
	after := h.claim("e1", 10)
	require.Equal(t, []string{"after"}, names(after))
	require.JSONEq(t, `{"signal":"approve","payload":{"by":"ada"}}`, string(after[0].Deps["approval"]))
	// A second signal of the same name finds no wait: it is kept.
	delivered, err = h.s.Signal(h.ctx, id, "approve", nil, "")
	require.NoError(t, err)
	require.False(t, delivered)
}

func testSignalBeforeWait(t *testing.T, h *harness) {
	id := signalTask(h, time.Hour)
	delivered, err := h.s.Signal(h.ctx, id, "approve", json.RawMessage(`"early"`), "")
	require.NoError(t, err)
	require.False(t, delivered, "nothing waits yet")
	// A name no step of the task waits for is refused, not kept for
	// nothing.
	_, err = h.s.Signal(h.ctx, id, "other", json.RawMessage(`1`), "")
	require.ErrorIs(t, err, store.ErrConflict)
	require.ErrorContains(t, err, `task `+strconv.FormatInt(id, 10)+` has no step that waits for signal "other"`)
	h.ok(h.claim("e1", 10)[0], `{}`)
	h.beginWait(id, "approval")
	task := h.task(id)
	require.Equal(t, state.StepCompleted, task.Steps[1].State, "the kept signal completes the wait as it begins")
	require.JSONEq(t, `{"signal":"approve","payload":"early"}`, string(task.Steps[1].Result))
	require.Equal(t, []string{"after"}, names(h.claim("e1", 10)))
}

func testSignalTimeout(t *testing.T, h *harness) {
	id := signalTask(h, time.Minute)
	h.ok(h.claim("e1", 10)[0], `{}`)
	h.clock.Advance(time.Second)
	h.beginWait(id, "approval")
	task := h.task(id)
	require.NotNil(t, task.Steps[1].RunAt)
	require.Equal(t, h.clock.Now().Add(time.Minute).UnixMicro(), task.Steps[1].RunAt.UnixMicro())
	next, ok, err := h.s.NextWake(h.ctx)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, task.Steps[1].RunAt.UnixMicro(), next.UnixMicro(), "the engine wakes for the deadline")
	n, err := h.s.Promote(h.ctx, h.clock.Now(), "e1")
	require.NoError(t, err)
	require.Zero(t, n, "not yet")
	h.clock.Advance(time.Minute)
	n, err = h.s.Promote(h.ctx, h.clock.Now(), "e1")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	task = h.task(id)
	require.Equal(t, state.StepFailed, task.Steps[1].State)
	require.Contains(t, task.Steps[1].Error, `timed out waiting for signal "approve"`)
	require.Equal(t, state.StepSkipped, task.Steps[2].State)
	require.Equal(t, state.TaskFailed, task.State)
	_, err = h.s.Signal(h.ctx, id, "approve", nil, "")
	require.ErrorIs(t, err, store.ErrConflict, "a task that ended takes no signals")
}

func testSignalRefused(t *testing.T, h *harness) {
	_, err := h.s.Signal(h.ctx, 424242, "x", nil, "")
	require.ErrorIs(t, err, store.ErrNotFound)
	id := signalTask(h, 0)
	_, err = h.s.Signal(h.ctx, id, "x", json.RawMessage(`{bad`), "")
	require.Error(t, err)
	_, err = h.s.Signal(h.ctx, id, "", nil, "")
	require.Error(t, err)
}

// testSignalWaitStartsTask: a task whose first step waits for a signal is
// pending until an engine claims that step, and running from then, as a
// task is whose wait follows a step that ran; the claim counts under a
// workflow limit as any first claim does, so a second such task waits its
// turn with its step ready.
func testSignalWaitStartsTask(t *testing.T, h *harness) {
	limited := func() store.TaskInsert {
		return store.TaskInsert{Namespace: "sigwait", LimitKey: "workflow:sigwait/wf", Limit: 1, Steps: []store.StepInsert{
			{Name: "wait", Kind: store.KindSignal, Signal: "go", SignalTimeout: time.Hour, MaxAttempts: 3},
			{Name: "after", Handler: "h", MaxAttempts: 1, Deps: []int{0}}}}
	}
	res := h.insert(limited(), limited())
	first, second := res[0].Task.ID, res[1].Task.ID
	task := h.task(first)
	require.Equal(t, state.TaskPending, task.State)
	require.Equal(t, state.StepReady, task.Steps[0].State)
	require.Equal(t, store.SignalHandler, task.Steps[0].Handler)

	got := h.claimWith(store.ClaimParams{EngineID: "e1", Limit: 10, Namespaces: []string{"sigwait"}})
	require.Len(t, got, 1, "a workflow limit of 1: one task starts")
	require.Equal(t, first, got[0].TaskID)
	h.clock.Advance(time.Second)
	require.NoError(t, h.complete(waitOutcome(got[0]))[0])
	task = h.task(first)
	require.Equal(t, state.TaskRunning, task.State, "the wait began under a claim: the task runs")
	require.Equal(t, state.StepWaiting, task.Steps[0].State)
	require.Zero(t, task.Steps[0].Attempts)
	require.NotNil(t, task.Steps[0].RunAt)
	require.Equal(t, h.clock.Now().Add(time.Hour).UnixMicro(), task.Steps[0].RunAt.UnixMicro(), "the deadline counts from the wait's start")
	require.Equal(t, state.TaskPending, h.task(second).State)
	require.Empty(t, h.claimWith(store.ClaimParams{EngineID: "e1", Limit: 10, Namespaces: []string{"sigwait"}}),
		"the waiting task holds the workflow's one place")

	// A stale fence begins nothing; an outcome that begins a wait must wait.
	stale := waitOutcome(got[0])
	require.ErrorIs(t, h.complete(stale)[0], store.ErrStaleLease)

	delivered, err := h.s.Signal(h.ctx, first, "go", json.RawMessage(`1`), "op")
	require.NoError(t, err)
	require.True(t, delivered)
	h.ok(h.claimNext(first, "after"), `{}`)
	require.Equal(t, state.TaskCompleted, h.task(first).State)

	c := h.claimNext(second, "wait")
	bad := waitOutcome(c)
	bad.State = state.StepCompleted
	_, err = h.s.CompleteSteps(h.ctx, []store.Outcome{bad})
	require.ErrorIs(t, err, store.ErrRefused, "an outcome that begins a wait and completes")
	require.NoError(t, h.complete(waitOutcome(c))[0])
	require.Equal(t, state.TaskRunning, h.task(second).State)
}

// testSignalBesideWaitStart: a signal sent while the outcome that begins
// its step's wait is being written is never lost between them: either the
// wait takes it as it begins, or the signal finds the step waiting.
func testSignalBesideWaitStart(t *testing.T, h *harness) {
	const tasks = 30
	for i := range tasks {
		id := h.insert(store.TaskInsert{Namespace: "beside", Steps: []store.StepInsert{
			{Name: "wait", Kind: store.KindSignal, Signal: "go", MaxAttempts: 1}}})[0].Task.ID
		c := h.claimNext(id, "wait")
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			if _, err := h.s.CompleteSteps(h.ctx, []store.Outcome{waitOutcome(c)}); err != nil {
				t.Errorf("begin the wait of task %d: %v", id, err)
			}
		}()
		go func() {
			defer wg.Done()
			if _, err := h.s.Signal(h.ctx, id, "go", json.RawMessage(strconv.Itoa(i)), "op"); err != nil {
				t.Errorf("signal task %d: %v", id, err)
			}
		}()
		wg.Wait()
		task := h.task(id)
		require.Equal(t, state.StepCompleted, task.Steps[0].State, "task %d: the signal and the wait met", id)
		require.Equal(t, state.TaskCompleted, task.State)
	}
}
