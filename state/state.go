// Package state defines the task and step state machines of weft.
//
// Every transition weft writes is checked here first and then written with a
// compare-and-swap on the expected current state, so a transition that this
// package refuses never reaches the database.
//
// Step states:
//
//	pending   waiting for its dependencies
//	ready     eligible to be claimed
//	running   claimed by an engine under a lease (sub-status "deferred" while
//	          its handler waits with its slot released)
//	waiting   not eligible until its run_at (retry backoff, snooze or timer),
//	          or until the signal it waits for arrives
//	completed finished successfully (terminal)
//	failed    failed permanently (terminal until an operator retries it)
//	skipped   not run: a dependency failed or its trigger rule was false
//	cancelled its task was cancelled (terminal)
//	expired   its ttl or its task's good_until passed before it started
//	resolved  marked resolved manually by an operator (terminal)
//
// Task states:
//
//	pending   submitted, no step has started yet
//	running   at least one step has started
//	completed every step ended and none failed
//	failed    a step failed permanently (retry moves it back to running)
//	cancelled cancelled by a user
//	expired   its good_until passed before any step started
package state

import "fmt"

// Step is the state of one step of a task.
type Step string

// Step states.
const (
	StepPending   Step = "pending"
	StepReady     Step = "ready"
	StepRunning   Step = "running"
	StepWaiting   Step = "waiting"
	StepCompleted Step = "completed"
	StepFailed    Step = "failed"
	StepSkipped   Step = "skipped"
	StepCancelled Step = "cancelled"
	StepExpired   Step = "expired"
	StepResolved  Step = "resolved"
)

// Task is the state of a task.
type Task string

// Task states.
const (
	TaskPending   Task = "pending"
	TaskRunning   Task = "running"
	TaskCompleted Task = "completed"
	TaskFailed    Task = "failed"
	TaskCancelled Task = "cancelled"
	TaskExpired   Task = "expired"
)

// SubDeferred is the sub-status of a running step whose handler is waiting in
// DeferUntil with its slot released.
const SubDeferred = "deferred"

// Steps lists every step state.
var Steps = []Step{StepPending, StepReady, StepRunning, StepWaiting, StepCompleted, StepFailed, StepSkipped, StepCancelled, StepExpired, StepResolved}

// Tasks lists every task state.
var Tasks = []Task{TaskPending, TaskRunning, TaskCompleted, TaskFailed, TaskCancelled, TaskExpired}

var stepEdges = map[Step][]Step{
	// Dependencies satisfied (ready, or waiting when run_at is in the
	// future), a parent failed or a trigger rule was false (skipped), the
	// task was cancelled, or the task's good_until passed.
	StepPending: {StepReady, StepWaiting, StepSkipped, StepCancelled, StepExpired, StepResolved},
	// Claimed, deferred for want of a rate-limit token (waiting), its ttl
	// passed, its task cancelled, an operator resolved it.
	StepReady: {StepRunning, StepWaiting, StepExpired, StepCancelled, StepResolved},
	// Outcome recorded, retry scheduled or snoozed (waiting), lease lapsed and
	// the step returned to the queue (ready), task cancelled, its when
	// condition was false (skipped).
	StepRunning: {StepCompleted, StepFailed, StepWaiting, StepReady, StepCancelled, StepSkipped},
	// run_at came, ttl passed, task cancelled, operator resolved it, the
	// signal it waited for arrived (completed) or its wait timed out
	// (failed).
	StepWaiting: {StepReady, StepExpired, StepCancelled, StepResolved, StepCompleted, StepFailed},
	// Retry of a failed task or step puts a failed step back in the state
	// its kind starts in: the queue (ready), or, for a signal step, its
	// wait for the signal (waiting). An operator may resolve it.
	StepFailed:  {StepReady, StepWaiting, StepResolved},
	StepExpired: {StepReady, StepWaiting, StepResolved},
	// Retry of a failed task re-evaluates the steps skipped because of it.
	StepSkipped:   {StepPending},
	StepCompleted: nil,
	StepCancelled: nil,
	StepResolved:  nil,
}

var taskEdges = map[Task][]Task{
	TaskPending:   {TaskRunning, TaskCompleted, TaskFailed, TaskCancelled, TaskExpired},
	TaskRunning:   {TaskCompleted, TaskFailed, TaskCancelled},
	TaskFailed:    {TaskRunning},
	TaskCompleted: nil,
	TaskCancelled: nil,
	TaskExpired:   nil,
}

// CanStep reports whether a step may move from one state to another.
func CanStep(from, to Step) bool {
	for _, s := range stepEdges[from] {
		if s == to {
			return true
		}
	}
	return false
}

// CanTask reports whether a task may move from one state to another.
func CanTask(from, to Task) bool {
	for _, s := range taskEdges[from] {
		if s == to {
			return true
		}
	}
	return false
}

// CheckStep returns an error naming both states if the transition is illegal.
func CheckStep(from, to Step) error {
	if !CanStep(from, to) {
		return fmt.Errorf("illegal step transition %s -> %s", from, to)
	}
	return nil
}

// CheckTask returns an error naming both states if the transition is illegal.
func CheckTask(from, to Task) error {
	if !CanTask(from, to) {
		return fmt.Errorf("illegal task transition %s -> %s", from, to)
	}
	return nil
}

// Terminal reports whether no further transition happens without an operator.
func (s Step) Terminal() bool {
	switch s {
	case StepCompleted, StepFailed, StepSkipped, StepCancelled, StepExpired, StepResolved:
		return true
	}
	return false
}

// Succeeded reports whether dependents may use this step's outcome as success.
func (s Step) Succeeded() bool { return s == StepCompleted || s == StepResolved }

// Valid reports whether s is a known step state.
func (s Step) Valid() bool { _, ok := stepEdges[s]; return ok }

// Terminal reports whether the task has ended.
func (t Task) Terminal() bool {
	switch t {
	case TaskCompleted, TaskFailed, TaskCancelled, TaskExpired:
		return true
	}
	return false
}

// Valid reports whether t is a known task state.
func (t Task) Valid() bool { _, ok := taskEdges[t]; return ok }
