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

// Retries of every kind of step: whichever way an operator retries (the
// task, the step, in bulk), a failed or expired step returns to the state
// its kind starts in, and its task can finish.

var retryKindTests = []struct {
	name string
	fn   func(t *testing.T, h *harness)
}{
	{"RetryEveryStepKindProgresses", testRetryEveryKind},
	{"RetriedSignalStepTakesKeptSignal", testRetriedSignalTakesKept},
}

// retryWays are the store's ways to retry: the task, the step alone, and
// the bulk retry of tasks.
var retryWays = []struct {
	name  string
	retry func(h *harness, taskID int64, step string) error
}{
	{"task", func(h *harness, taskID int64, _ string) error { return h.s.RetryTask(h.ctx, taskID, "op", "") }},
	{"step", func(h *harness, taskID int64, step string) error {
		return h.s.RetryStep(h.ctx, stepByName(h.t, h.task(taskID), step).ID, "op", "")
	}},
	{"bulk", func(h *harness, taskID int64, _ string) error {
		res, err := h.s.RetryTasks(h.ctx, []int64{taskID}, "op", "")
		if err == nil && len(res.Done) != 1 {
			err = fmt.Errorf("bulk retry retried %v", res.Done)
		}
		return err
	}},
}

func stepByName(t *testing.T, task *store.Task, name string) store.Step {
	t.Helper()
	for _, s := range task.Steps {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("task %d has no step %q", task.ID, name)
	return store.Step{}
}

// retryKinds builds, for each kind of step, a task and drives the step
// named target to a failure (or expiry) that fails the task.
var retryKinds = []struct {
	name   string
	target string
	steps  []store.StepInsert
	fail   func(h *harness, id int64)
}{
	{name: "plain", target: "a", steps: chain("a", "b"), fail: func(h *harness, id int64) { h.failNext(id, "a") }},
	{name: "snoozed then failed", target: "a", steps: chain("a", "b"), fail: func(h *harness, id int64) {
		c := h.claimNext(id, "a")
		require.NoError(h.t, h.complete(store.Outcome{Fence: c.Fence, EngineID: "e1", State: state.StepWaiting,
			Snooze: true, RunAt: h.clock.Now().Add(time.Minute)})[0])
		h.clock.Advance(time.Minute)
		h.promote()
		h.failNext(id, "a")
	}},
	{name: "expired by ttl", target: "a", steps: []store.StepInsert{
		{Name: "a", Handler: "h", MaxAttempts: 1, TTL: time.Minute},
		{Name: "b", Handler: "h", MaxAttempts: 1, Deps: []int{0}},
	}, fail: func(h *harness, id int64) {
		h.clock.Advance(time.Minute)
		_, err := h.s.Expire(h.ctx, h.clock.Now(), "e1")
		require.NoError(h.t, err)
	}},
	{name: "decision", target: "d", steps: []store.StepInsert{
		{Name: "d", Handler: "h", MaxAttempts: 1, Kind: store.KindDecision},
		{Name: "x", Handler: "h", MaxAttempts: 1, Deps: []int{0}},
	}, fail: func(h *harness, id int64) { h.failNext(id, "d") }},
	{name: "batch", target: "split", steps: []store.StepInsert{
		{Name: "split", Handler: "h", MaxAttempts: 1, Kind: store.KindBatch},
		{Name: "agg", Handler: "h", MaxAttempts: 1, Deps: []int{0}},
	}, fail: func(h *harness, id int64) { h.failNext(id, "split") }},
	{name: "batch item", target: "split[1]", steps: []store.StepInsert{
		{Name: "split", Handler: "h", MaxAttempts: 1, Kind: store.KindBatch},
		{Name: "agg", Handler: "h", MaxAttempts: 1, Deps: []int{0}},
	}, fail: func(h *harness, id int64) {
		c := h.claimNext(id, "split")
		require.NoError(h.t, h.complete(store.Outcome{Fence: c.Fence, EngineID: "e1", State: state.StepCompleted, Spawn: spawn(2)})[0])
		h.outcome(h.claimNext(id, "split[0]"), state.StepCompleted)
		h.failNext(id, "split[1]")
	}},
	{name: "workflow", target: "call", steps: parentSteps(), fail: func(h *harness, id int64) {
		c := h.claimNext(id, "call")
		require.NoError(h.t, h.complete(store.Outcome{Fence: c.Fence, EngineID: "e1", State: state.StepWaiting,
			Child: &store.ChildStart{Task: childInsert(fmt.Sprintf("child:first/%d", id))}})[0])
		child := h.task(id).Steps[0].ChildTaskID
		h.failNext(child, "first")
		again := h.claimNext(id, "call")
		require.NotEmpty(h.t, again.ChildError)
		require.NoError(h.t, h.complete(store.Outcome{Fence: again.Fence, EngineID: "e1", State: state.StepFailed,
			Error: again.ChildError, ChildConsumed: true})[0])
	}},
	{name: "signal timed out", target: "approval", steps: []store.StepInsert{
		{Name: "approval", Kind: store.KindSignal, Signal: "approve", SignalTimeout: time.Minute, MaxAttempts: 1},
		{Name: "after", Handler: "h", MaxAttempts: 1, Deps: []int{0}},
	}, fail: func(h *harness, id int64) {
		h.beginWait(id, "approval")
		h.clock.Advance(time.Minute)
		h.promote()
	}},
}

func testRetryEveryKind(t *testing.T, h *harness) {
	for _, kind := range retryKinds {
		for _, way := range retryWays {
			t.Run(kind.name+"/"+way.name, func(t *testing.T) {
				h := h.in(t)
				id := h.insert(store.TaskInsert{Steps: kind.steps})[0].Task.ID
				kind.fail(h, id)
				task := h.task(id)
				require.Equal(t, state.TaskFailed, task.State, "set-up: the task failed")
				require.Contains(t, []state.Step{state.StepFailed, state.StepExpired}, stepByName(t, task, kind.target).State)

				require.NoError(t, way.retry(h, id, kind.target))
				task = h.task(id)
				require.Equal(t, state.TaskRunning, task.State)
				step := stepByName(t, task, kind.target)
				require.Zero(t, step.Attempts, "a retried step's attempts start afresh")
				require.Empty(t, step.Error)
				if step.Kind == store.KindSignal {
					require.Equal(t, state.StepWaiting, step.State, "a retried signal step waits for its signal again")
					require.NotNil(t, step.RunAt)
					require.Equal(t, h.clock.Now().Add(time.Minute).UnixMicro(), step.RunAt.UnixMicro(), "with a fresh timeout")
				} else {
					require.Equal(t, state.StepReady, step.State, "a retried step is ready to be claimed")
				}

				task = h.drive(id)
				require.Equal(t, state.TaskCompleted, task.State, "after a retry the task finishes: %v", states(task))
			})
		}
	}
}

// testRetriedSignalTakesKept: a signal that arrived while no step waited
// for it (the step's wait had timed out) completes the step as soon as a
// retry makes it wait again, as it would have on its first wait.
func testRetriedSignalTakesKept(t *testing.T, h *harness) {
	for _, way := range retryWays {
		t.Run(way.name, func(t *testing.T) {
			h := h.in(t)
			id := h.insert(store.TaskInsert{Steps: []store.StepInsert{
				{Name: "approval", Kind: store.KindSignal, Signal: "approve", SignalTimeout: time.Minute, MaxAttempts: 1},
				{Name: "slow", Handler: "h", MaxAttempts: 1},
			}})[0].Task.ID
			h.beginWait(id, "approval")
			slow := h.claimNext(id, "slow")
			h.clock.Advance(time.Minute)
			h.promote()
			require.Equal(t, state.StepFailed, stepByName(t, h.task(id), "approval").State)
			delivered, err := h.s.Signal(h.ctx, id, "approve", json.RawMessage(`"late"`), "op")
			require.NoError(t, err)
			require.False(t, delivered, "no step waits: the signal is kept")
			if way.name != "step" {
				h.outcome(slow, state.StepCompleted) // a task is retried once it failed
				require.Equal(t, state.TaskFailed, h.task(id).State)
			}
			require.NoError(t, way.retry(h, id, "approval"))
			task := h.task(id)
			approval := stepByName(t, task, "approval")
			require.Equal(t, state.StepCompleted, approval.State, "the kept signal completes the wait as it begins again")
			require.JSONEq(t, `{"signal":"approve","payload":"late"}`, string(approval.Result))
			if way.name == "step" {
				h.outcome(slow, state.StepCompleted)
				task = h.task(id)
			}
			require.Equal(t, state.TaskCompleted, task.State)
		})
	}
}

// claimNext claims the ready step named name of task id (or of its child
// tasks) and fails the test if it is not the one claimed.
func (h *harness) claimNext(id int64, name string) store.ClaimedStep {
	h.t.Helper()
	got := h.claimWith(store.ClaimParams{EngineID: "e1", Limit: 1, TaskID: id})
	require.Equal(h.t, []string{name}, names(got))
	return got[0]
}

// failNext claims the step named name and fails it for good.
func (h *harness) failNext(id int64, name string) {
	h.t.Helper()
	h.fail(h.claimNext(id, name), false)
}

// drive runs task id to its end as engines would, every step succeeding:
// it claims what is ready (child tasks included), completes each step as
// its kind does (a decision runs every branch, a batch spawns two items, a
// workflow step starts a child) and sends the signal of each waiting
// signal step. It fails the test if the task stops moving.
func (h *harness) drive(id int64) *store.Task {
	h.t.Helper()
	for round := 0; ; round++ {
		task := h.task(id)
		if task.State.Terminal() {
			return task
		}
		require.Less(h.t, round, 50, "task %d does not finish: %v", id, states(task))
		moved := false
		for _, s := range task.Steps {
			if s.Kind == store.KindSignal && s.State == state.StepWaiting {
				delivered, err := h.s.Signal(h.ctx, id, s.Signal, json.RawMessage(`"ok"`), "op")
				require.NoError(h.t, err)
				require.True(h.t, delivered, "step %q waits for signal %q", s.Name, s.Signal)
				moved = true
			}
		}
		for _, c := range h.claimWith(store.ClaimParams{EngineID: "e1", Limit: 10, TaskID: id}) {
			moved = true
			o := store.Outcome{Fence: c.Fence, EngineID: "e1", State: state.StepCompleted, Result: json.RawMessage(`{}`)}
			switch c.Kind {
			case store.KindDecision:
				o.Decide = true
				for _, b := range task.Steps {
					for _, d := range b.DependsOn {
						if d == c.Name {
							o.Branches = append(o.Branches, b.Name)
						}
					}
				}
			case store.KindBatch:
				o.Spawn = spawn(2)
			case store.KindSignal:
				o = waitOutcome(c)
			case store.KindWorkflow:
				o.State, o.Result = state.StepWaiting, nil
				o.Child = &store.ChildStart{Task: childInsert(fmt.Sprintf("child:%d/%d/%d", c.ID, c.Fence.Attempt, c.Fence.LeaseID))}
			}
			require.NoError(h.t, h.complete(o)[0], "outcome of %q", c.Name)
		}
		require.True(h.t, moved, "task %d does not move: %v", id, states(task))
	}
}
