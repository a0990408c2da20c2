// Package durable runs durable functions by replay: a function runs from
// the top each time its task's function step runs, and each call it makes
// (a step of code, a sleep, a wait for a signal, a child task) returns the
// result its task recorded, or, when the task has none yet, is issued as a
// new step for the engine to create, and the function stops there until
// the calls it waits for have ended.
//
// The package knows nothing of stores: the engine gives it the calls the
// task recorded (a Journal) and turns what it issues into steps.
package durable

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/weftrun/weft/internal/ident"
)

// Kinds of call, as an item of a call step records them.
const (
	CallStep   = "step"
	CallSleep  = "sleep"
	CallSignal = "signal"
	CallChild  = "child"
)

// Item is what a call's step records of it (the step's item).
type Item struct {
	Call string `json:"call"`
	// Step holds a step call's options (retry, timeout, priority,
	// preemptible) and a child's workflow: a workflow.Step as JSON, which
	// the engine reads.
	Step json.RawMessage `json:"step,omitempty"`
	// Input is a child's input.
	Input json.RawMessage `json:"input,omitempty"`
}

// Recorded is one call the task recorded: a step of the task, in the
// order the function made them.
type Recorded struct {
	Name  string
	Call  string
	Ended bool
	// Succeeded with Result, or failed with Error (ended).
	Succeeded bool
	Result    json.RawMessage
	Error     string
}

// Request is a call the function made that its task has not recorded: the
// engine creates its step.
type Request struct {
	Name string
	Item Item
	// Until is when a sleep ends.
	Until time.Time
	// Signal and Timeout are what a signal call waits for.
	Signal  string
	Timeout time.Duration
	// Run is a step call's code, as this run made it: the process that
	// claims the call's step may run it without replaying the function.
	Run func(context.Context) (json.RawMessage, error)
}

// CallError is the error of a call that failed: its step failed, or a
// signal's wait timed out. A function that returns it fails for good:
// running it again would replay the same failure.
type CallError struct {
	Name string // the call's step
	Msg  string
}

func (e *CallError) Error() string { return fmt.Sprintf("call %q failed: %s", e.Name, e.Msg) }

// NonDeterminismError: the function, run again, made a call other than
// the one its task recorded at that point, or fewer calls.
type NonDeterminismError struct{ Msg string }

func (e *NonDeterminismError) Error() string { return "non-determinism: " + e.Msg }

// Func is a durable function as the engine runs it: its input as JSON,
// its result as JSON.
type Func func(r *Replay, input json.RawMessage) (json.RawMessage, error)

// Replay is one run of a function over its task's journal.
type Replay struct {
	ctx     context.Context
	TaskID  int64
	journal []Recorded
	next    int            // the position of the next call
	used    map[string]int // how many calls used each name
	issued  []Request
	// target is the call a call step runs (call mode); "" when the
	// function step runs.
	target  string
	reached bool
	value   json.RawMessage
	err     error
	// stop is why the run stopped early: a non-determinism, a call mode
	// that could not reach its call.
	stop error
}

// Context is the context the function runs under (its step's).
func (r *Replay) Context() context.Context { return r.ctx }

// Handle is a call the function made.
type Handle struct {
	r    *Replay
	name string
	rec  *Recorded // nil: a new call
}

// Name is the call's step name.
func (h *Handle) Name() string { return h.name }

// Call makes a call: it checks it against the journal and returns its
// handle. In call mode, the call that the step runs is run here, by fn,
// and the replay ends. reserved names the function step, which no call
// may take.
func (r *Replay) Call(name string, req Request, fn func(context.Context) (json.RawMessage, error)) *Handle {
	if !ident.Valid(name) {
		r.halt(fmt.Errorf("call name %q: use %s", name, ident.Rule))
	}
	n := r.used[name]
	r.used[name] = n + 1
	if n > 0 {
		name = fmt.Sprintf("%s[%d]", name, n+1)
	}
	req.Name, req.Run = name, fn
	pos := r.next
	r.next++
	if pos >= len(r.journal) {
		r.issued = append(r.issued, req)
		return &Handle{r: r, name: name}
	}
	rec := &r.journal[pos]
	if rec.Name != name || rec.Call != req.Item.Call {
		r.halt(&NonDeterminismError{Msg: fmt.Sprintf("call %d is %s %q, but the task recorded %s %q there (change the function under a new version)",
			pos+1, req.Item.Call, name, rec.Call, rec.Name)})
	}
	if r.target != "" && name == r.target {
		r.reached = true
		r.value, r.err = fn(r.ctx)
		runtime.Goexit()
	}
	return &Handle{r: r, name: name, rec: rec}
}

// Wait returns the call's result, or stops the function until the call
// has ended.
func (h *Handle) Wait() (json.RawMessage, error) {
	if h.rec != nil && h.rec.Ended {
		if !h.rec.Succeeded {
			return nil, &CallError{Name: h.name, Msg: h.rec.Error}
		}
		return h.rec.Result, nil
	}
	if h.r.target != "" {
		h.r.halt(fmt.Errorf("the function waited for call %q before it made call %q", h.name, h.r.target))
	}
	runtime.Goexit()
	return nil, nil
}

// halt ends the run with err.
func (r *Replay) halt(err error) {
	r.stop = err
	runtime.Goexit()
}

// Outcome is how a run of a function step ended.
type Outcome struct {
	// Calls are the new calls to create; the function step waits for them.
	Calls []Request
	// Waiting: the function waits for a call its task recorded that has
	// not ended (an operator retried it): the function step runs again
	// later.
	Waiting bool
	// Otherwise the function returned Value or Err.
	Value json.RawMessage
	Err   error
}

// Drive runs the function of a function step over journal.
func Drive(ctx context.Context, taskID int64, journal []Recorded, fn Func, input json.RawMessage) Outcome {
	r := &Replay{ctx: ctx, TaskID: taskID, journal: journal, used: map[string]int{}}
	returned := r.run(fn, input)
	switch {
	case r.stop != nil:
		return Outcome{Err: permanent{r.stop}}
	case len(r.issued) > 0:
		// Calls never waited for are waited for before the function
		// ends: it returns again once they have.
		return Outcome{Calls: r.issued}
	case !returned:
		// Waiting for a recorded call that has not ended: the function
		// step ran early (an operator's retry); it runs again when the
		// call ends.
		return Outcome{Waiting: true}
	case r.err == nil && r.next < len(journal):
		return Outcome{Err: permanent{&NonDeterminismError{Msg: fmt.Sprintf("the function returned after %d calls, but the task recorded %d (the next is %s %q)",
			r.next, len(journal), journal[r.next].Call, journal[r.next].Name)}}}
	}
	return Outcome{Value: r.value, Err: r.err}
}

// RunCall runs the code of the step call target: the function replays up
// to that call, which runs.
func RunCall(ctx context.Context, taskID int64, journal []Recorded, target string, fn Func, input json.RawMessage) (json.RawMessage, error) {
	r := &Replay{ctx: ctx, TaskID: taskID, journal: journal, used: map[string]int{}, target: target}
	r.run(fn, input)
	switch {
	case r.reached:
		return r.value, r.err
	case r.stop != nil:
		return nil, permanent{r.stop}
	case r.err != nil:
		return nil, permanent{fmt.Errorf("the function, replayed to run call %q, failed before it: %w", target, r.err)}
	}
	return nil, permanent{fmt.Errorf("the function, replayed, did not make call %q (change the function under a new version)", target)}
}

// run runs fn on a goroutine of its own, which a call that must stop the
// function ends with runtime.Goexit (deferred calls run; recover cannot
// stop it). It reports whether the function returned.
func (r *Replay) run(fn Func, input json.RawMessage) bool {
	done := make(chan bool, 1)
	go func() {
		returned := false
		defer func() { done <- returned }()
		defer func() {
			if p := recover(); p != nil {
				r.err = fmt.Errorf("function panicked: %v\n%s", p, debug.Stack())
				returned = true
			}
		}()
		r.value, r.err = fn(r, input)
		returned = true
	}()
	return <-done
}

// permanent marks an error that running the function again cannot change.
type permanent struct{ error }

func (p permanent) Unwrap() error { return p.error }

// IsPermanent reports whether err is one that running the function again
// cannot change: a non-determinism, or a failed call the function passed
// on.
func IsPermanent(err error) bool {
	var p permanent
	var c *CallError
	return errors.As(err, &p) || errors.As(err, &c)
}

// Encoded is the code of a step call whose result is a Go value: the value
// as JSON. A value that cannot be encoded fails the call through
// permanent, the caller's mark of a failure that running again cannot
// change.
func Encoded[T any](name string, fn func(context.Context) (T, error), permanent func(error) error) func(context.Context) (json.RawMessage, error) {
	return func(ctx context.Context) (json.RawMessage, error) {
		v, err := fn(ctx)
		if err != nil {
			return nil, err
		}
		b, err := json.Marshal(v)
		if err != nil {
			return nil, permanent(fmt.Errorf("result of call %q is not JSON-encodable: %w", name, err))
		}
		return b, nil
	}
}
