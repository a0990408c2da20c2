package state

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// legalStep is the step state machine, written out edge by edge. Every pair
// of step states not listed here must be refused.
var legalStep = map[[2]Step]bool{
	// pending: waiting for its dependencies.
	{StepPending, StepReady}:     true, // dependencies satisfied
	{StepPending, StepWaiting}:   true, // dependencies satisfied, run_at in the future
	{StepPending, StepSkipped}:   true, // a dependency failed or the trigger rule was false
	{StepPending, StepCancelled}: true, // task cancelled
	{StepPending, StepExpired}:   true, // task's good_until passed
	{StepPending, StepResolved}:  true, // operator resolved it

	// ready: eligible to be claimed.
	{StepReady, StepRunning}:   true, // claimed by an engine
	{StepReady, StepWaiting}:   true, // no rate-limit token: deferred to when one exists
	{StepReady, StepExpired}:   true, // ttl passed before it started
	{StepReady, StepCancelled}: true, // task cancelled
	{StepReady, StepResolved}:  true, // operator resolved it

	// running: claimed under a lease.
	{StepRunning, StepCompleted}: true, // handler succeeded
	{StepRunning, StepFailed}:    true, // handler failed permanently
	{StepRunning, StepWaiting}:   true, // retry backoff, snooze or timer
	{StepRunning, StepReady}:     true, // lease lapsed, back to the queue
	{StepRunning, StepCancelled}: true, // task cancelled
	{StepRunning, StepSkipped}:   true, // its when condition was false

	// waiting: not eligible until run_at.
	{StepWaiting, StepReady}:     true, // run_at came
	{StepWaiting, StepExpired}:   true, // ttl passed
	{StepWaiting, StepCancelled}: true, // task cancelled
	{StepWaiting, StepResolved}:  true, // operator resolved it
	{StepWaiting, StepCompleted}: true, // the signal it waited for arrived
	{StepWaiting, StepFailed}:    true, // its wait for a signal timed out

	// failed, expired: an operator retries or resolves them.
	{StepFailed, StepReady}:     true,
	{StepFailed, StepWaiting}:   true, // a signal step retried waits for its signal again
	{StepFailed, StepResolved}:  true,
	{StepExpired, StepReady}:    true,
	{StepExpired, StepWaiting}:  true, // a signal step retried waits for its signal again
	{StepExpired, StepResolved}: true,

	// skipped: re-evaluated when its failed task is retried.
	{StepSkipped, StepPending}: true,

	// completed, cancelled, resolved: no way out.
}

// legalTask is the task state machine, written out edge by edge. Every pair
// of task states not listed here must be refused.
var legalTask = map[[2]Task]bool{
	{TaskPending, TaskRunning}:   true, // a step started
	{TaskPending, TaskCompleted}: true, // ended without any step starting (all skipped or resolved)
	{TaskPending, TaskFailed}:    true, // failed before any step started
	{TaskPending, TaskCancelled}: true, // cancelled by a user
	{TaskPending, TaskExpired}:   true, // good_until passed before any step started

	{TaskRunning, TaskCompleted}: true, // every step ended, none failed
	{TaskRunning, TaskFailed}:    true, // a step failed permanently
	{TaskRunning, TaskCancelled}: true, // cancelled by a user

	{TaskFailed, TaskRunning}: true, // operator retried it

	// completed, cancelled, expired: no way out.
}

// bogusStep and bogusTask are states the machine does not know.
const (
	bogusStep Step = "bogus"
	bogusTask Task = "bogus"
)

func TestStepTransitions(t *testing.T) {
	t.Parallel()
	states := append([]Step{bogusStep, ""}, Steps...)
	for _, from := range states {
		for _, to := range states {
			name := string(from) + "->" + string(to)
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				want := legalStep[[2]Step{from, to}]
				require.Equal(t, want, CanStep(from, to))
				err := CheckStep(from, to)
				if want {
					require.NoError(t, err)
					return
				}
				require.EqualError(t, err, "illegal step transition "+string(from)+" -> "+string(to))
			})
		}
	}
}

func TestTaskTransitions(t *testing.T) {
	t.Parallel()
	states := append([]Task{bogusTask, ""}, Tasks...)
	for _, from := range states {
		for _, to := range states {
			name := string(from) + "->" + string(to)
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				want := legalTask[[2]Task{from, to}]
				require.Equal(t, want, CanTask(from, to))
				err := CheckTask(from, to)
				if want {
					require.NoError(t, err)
					return
				}
				require.EqualError(t, err, "illegal task transition "+string(from)+" -> "+string(to))
			})
		}
	}
}

// TestLegalTablesUseKnownStates guards the tables above against typos.
func TestLegalTablesUseKnownStates(t *testing.T) {
	t.Parallel()
	for e := range legalStep {
		require.True(t, e[0].Valid(), "%s", e[0])
		require.True(t, e[1].Valid(), "%s", e[1])
	}
	for e := range legalTask {
		require.True(t, e[0].Valid(), "%s", e[0])
		require.True(t, e[1].Valid(), "%s", e[1])
	}
}

func TestStepProperties(t *testing.T) {
	t.Parallel()
	tests := []struct {
		s         Step
		valid     bool
		terminal  bool
		succeeded bool
	}{
		{StepPending, true, false, false},
		{StepReady, true, false, false},
		{StepRunning, true, false, false},
		{StepWaiting, true, false, false},
		{StepCompleted, true, true, true},
		{StepFailed, true, true, false},
		{StepSkipped, true, true, false},
		{StepCancelled, true, true, false},
		{StepExpired, true, true, false},
		{StepResolved, true, true, true},
		{bogusStep, false, false, false},
		{"", false, false, false},
		{"Pending", false, false, false},
		{SubDeferred, false, false, false}, // a sub-status, not a state
	}
	require.Len(t, tests, len(Steps)+4, "every step state has a row")
	for _, tt := range tests {
		t.Run(string(tt.s), func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.valid, tt.s.Valid(), "Valid")
			require.Equal(t, tt.terminal, tt.s.Terminal(), "Terminal")
			require.Equal(t, tt.succeeded, tt.s.Succeeded(), "Succeeded")
		})
	}
}

func TestTaskProperties(t *testing.T) {
	t.Parallel()
	tests := []struct {
		s        Task
		valid    bool
		terminal bool
	}{
		{TaskPending, true, false},
		{TaskRunning, true, false},
		{TaskCompleted, true, true},
		{TaskFailed, true, true},
		{TaskCancelled, true, true},
		{TaskExpired, true, true},
		{bogusTask, false, false},
		{"", false, false},
		{"Running", false, false},
	}
	require.Len(t, tests, len(Tasks)+3, "every task state has a row")
	for _, tt := range tests {
		t.Run(string(tt.s), func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.valid, tt.s.Valid(), "Valid")
			require.Equal(t, tt.terminal, tt.s.Terminal(), "Terminal")
		})
	}
}

// TestStateLists checks that Steps and Tasks list every state once.
func TestStateLists(t *testing.T) {
	t.Parallel()
	require.ElementsMatch(t, []Step{
		StepPending, StepReady, StepRunning, StepWaiting, StepCompleted,
		StepFailed, StepSkipped, StepCancelled, StepExpired, StepResolved,
	}, Steps)
	require.ElementsMatch(t, []Task{
		TaskPending, TaskRunning, TaskCompleted, TaskFailed, TaskCancelled, TaskExpired,
	}, Tasks)
	for _, s := range Steps {
		require.True(t, s.Valid(), "%s", s)
	}
	for _, s := range Tasks {
		require.True(t, s.Valid(), "%s", s)
	}
}

// TestMachineShape checks properties that follow from the tables: a state
// with no way out is terminal, a non-terminal state has a way out, every
// state can be reached from pending, and a task or step never moves to the
// state it is in.
func TestMachineShape(t *testing.T) {
	t.Parallel()
	t.Run("steps", func(t *testing.T) {
		t.Parallel()
		reached := map[Step]bool{StepPending: true}
		for changed := true; changed; {
			changed = false
			for _, from := range Steps {
				for _, to := range Steps {
					if reached[from] && !reached[to] && CanStep(from, to) {
						reached[to], changed = true, true
					}
				}
			}
		}
		for _, s := range Steps {
			require.True(t, reached[s], "%s unreachable from pending", s)
			require.False(t, CanStep(s, s), "%s -> itself", s)
			out := false
			for _, to := range Steps {
				out = out || CanStep(s, to)
			}
			if !out {
				require.True(t, s.Terminal(), "%s has no way out but is not terminal", s)
			}
			if !s.Terminal() {
				require.True(t, out, "%s is not terminal but has no way out", s)
			}
		}
	})
	t.Run("tasks", func(t *testing.T) {
		t.Parallel()
		reached := map[Task]bool{TaskPending: true}
		for changed := true; changed; {
			changed = false
			for _, from := range Tasks {
				for _, to := range Tasks {
					if reached[from] && !reached[to] && CanTask(from, to) {
						reached[to], changed = true, true
					}
				}
			}
		}
		for _, s := range Tasks {
			require.True(t, reached[s], "%s unreachable from pending", s)
			require.False(t, CanTask(s, s), "%s -> itself", s)
			out := false
			for _, to := range Tasks {
				out = out || CanTask(s, to)
			}
			if !out {
				require.True(t, s.Terminal(), "%s has no way out but is not terminal", s)
			}
			if !s.Terminal() {
				require.True(t, out, "%s is not terminal but has no way out", s)
			}
		}
	})
}
