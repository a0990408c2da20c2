package weft

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/weftrun/weft/internal/durable"
	"github.com/weftrun/weft/internal/engine"
	"github.com/weftrun/weft/workflow"
)

// A durable function is a workflow written as ordinary Go code. Each call
// it makes through weft (Step, Go, FuncContext.Sleep,
// FuncContext.WaitSignal, Child) becomes a step of its task, recorded in
// the store. After a crash, a restart or a deploy, the function runs again
// from the top and every call that already ended returns its recorded
// result without running again: the function resumes from its last
// finished call. While it waits for a call (a sleep, a signal, a child, a
// step running elsewhere), it holds no slot and no goroutine.
//
// The function must be deterministic in the calls it makes: run again
// over the same recorded results, it makes the same calls in the same
// order. Anything that varies (time, randomness, I/O) belongs inside a
// Step. A run whose calls diverge from the recorded ones fails its task
// with an error wrapping ErrNonDeterminism that names the call; change a
// function's calls under a new version (FuncVersion) while old tasks
// finish on the old code. Calls are made from the function's own
// goroutine.

// ErrNonDeterminism is what a durable function's task fails with when the
// function, run again, makes calls other than those its task recorded.
var ErrNonDeterminism = errors.New("non-determinism")

// FuncContext is the context a durable function runs with: the context
// of its task's function step, and its calls.
type FuncContext interface {
	context.Context
	// TaskID is the function's task.
	TaskID() int64
	// Sleep waits d durably: the function stops, holding no slot, and
	// goes on from here once d has passed, whatever happened meanwhile.
	Sleep(d time.Duration) error
	// WaitSignal waits durably for the signal name (Engine.Signal, "weft
	// signal", the API) and returns its payload. A timeout above zero
	// bounds the wait: past it, the call fails. A signal sent before the
	// function waits for it is kept for it.
	WaitSignal(name string, timeout time.Duration) (json.RawMessage, error)

	replay() *durable.Replay
}

// funcContext is a FuncContext over one replay.
type funcContext struct {
	context.Context
	r *durable.Replay
}

func (c *funcContext) TaskID() int64           { return c.r.TaskID }
func (c *funcContext) replay() *durable.Replay { return c.r }

func (c *funcContext) Sleep(d time.Duration) error {
	h := c.r.Call("sleep", durable.Request{Item: durable.Item{Call: durable.CallSleep}, Until: time.Now().Add(d)}, nil)
	_, err := h.Wait()
	return wrapCallError(err)
}

func (c *funcContext) WaitSignal(name string, timeout time.Duration) (json.RawMessage, error) {
	h := c.r.Call(name, durable.Request{Item: durable.Item{Call: durable.CallSignal}, Signal: name, Timeout: timeout}, nil)
	raw, err := h.Wait()
	if err != nil {
		return nil, wrapCallError(err)
	}
	var got struct {
		Payload json.RawMessage `json:"payload"`
	}
	if err := json.Unmarshal(raw, &got); err != nil {
		return nil, fmt.Errorf("signal %q: %w", name, err)
	}
	return got.Payload, nil
}

// FuncOption configures a durable function at registration.
type FuncOption func(*funcOptions)

type funcOptions struct {
	version     string
	retry       workflow.RetryPolicy
	limits      workflow.Limits
	concurrency *workflow.Concurrency
}

// FuncVersion registers the function under version v (default "1"). A task
// runs on the version it was submitted to: register a function's changed
// code under a new version, and keep the old one registered while its
// tasks finish. A submission names no version to get the newest.
func FuncVersion(v string) FuncOption { return func(o *funcOptions) { o.version = v } }

// FuncRetry is the retry policy of the function itself, for an error it
// returns that is not a failed call's (default: 3 attempts). A failed
// call that the function returns fails its task at once: running the
// function again would replay the same failure.
func FuncRetry(p workflow.RetryPolicy) FuncOption { return func(o *funcOptions) { o.retry = p } }

// FuncLimits bounds the function's tasks: MaxSteps bounds its calls (the
// task's steps are its function step and one per call; a call past it
// fails the task), MaxDepth and MaxChildren its child tasks.
func FuncLimits(l workflow.Limits) FuncOption { return func(o *funcOptions) { o.limits = l } }

// FuncConcurrency lets at most limit tasks of the function run at once,
// across every engine; with key, at most limit per value of the CEL
// expression over the task input (see workflow.Workflow.WithConcurrency).
func FuncConcurrency(limit int, key string) FuncOption {
	return func(o *funcOptions) { o.concurrency = &workflow.Concurrency{Limit: limit, Key: key} }
}

// RegisterFunc registers fn as the durable function ref ("namespace/name")
// on e: its workflow definition in the store, and its handler on e. Submit
// tasks of ref as of any workflow; their input is decoded into In, and
// fn's result is the task's result under the function step's name,
// "function".
func RegisterFunc[In, Out any](ctx context.Context, e *Engine, ref string, fn func(FuncContext, In) (Out, error), opts ...FuncOption) error {
	o := funcOptions{version: "1"}
	for _, opt := range opts {
		opt(&o)
	}
	ns, name, version, err := workflow.ParseRef(ref)
	if err != nil {
		return fmt.Errorf("register function %q: %w", ref, err)
	}
	if version != "" {
		return fmt.Errorf("register function %q: give the version with FuncVersion, not in the name", ref)
	}
	w := workflow.New(ns, name, o.version).WithLimits(o.limits)
	if c := o.concurrency; c != nil {
		w = w.WithConcurrency(c.Limit, c.Key)
	}
	handler := w.Ref()
	w.Step(FunctionStep, handler, workflow.WithRetry(o.retry), func(s *workflow.Step) { s.Type = workflow.StepFunction })
	if err := e.Register(ctx, w); err != nil {
		return fmt.Errorf("register function %q: %w", ref, err)
	}
	e.core.HandleFunction(handler, func(r *durable.Replay, input json.RawMessage) (json.RawMessage, error) {
		var in In
		if err := json.Unmarshal(input, &in); err != nil {
			return nil, Permanent(fmt.Errorf("decode the input of task %d: %w", r.TaskID, err))
		}
		out, err := fn(&funcContext{Context: r.Context(), r: r}, in)
		if err != nil {
			return nil, err
		}
		b, err := json.Marshal(out)
		if err != nil {
			return nil, Permanent(fmt.Errorf("result is not JSON-encodable: %w", err))
		}
		return b, nil
	})
	return nil
}

// FunctionStep is the name of the step of a durable function's task that
// runs the function; its calls are the task's other steps.
const FunctionStep = "function"

// Step calls fn as a step of the function's task named name, and returns
// its result: recorded once fn succeeded, it is returned without running
// fn again. The step is claimed like any other (its retries, timeout,
// priority and preemption come from opts: workflow.WithRetry,
// workflow.WithTimeout, workflow.WithPriority, workflow.Preemptible), so
// it may run on another engine; its context is the attempt's. A name used
// twice in one task gets a count ("charge", "charge[2]"). An error that
// fails the step for good is returned as a *CallError; the function may
// handle it or return it, which fails the task.
func Step[T any](ctx FuncContext, name string, fn func(context.Context) (T, error), opts ...workflow.StepOption) (T, error) {
	return Go(ctx, name, fn, opts...).Get()
}

// Future is a call made with Go, whose result Get waits for.
type Future[T any] struct {
	h *durable.Handle
}

// Go is Step without waiting: the step may run while the function goes
// on, in parallel with other calls. Get waits for its result. A function
// that returns before it waits for a call still waits for it to end
// before its task ends.
func Go[T any](ctx FuncContext, name string, fn func(context.Context) (T, error), opts ...workflow.StepOption) *Future[T] {
	st := workflow.Step{Name: name}
	for _, opt := range opts {
		opt(&st)
	}
	item := durable.Item{Call: durable.CallStep, Step: engine.CallStep(workflow.Step{Retry: st.Retry, Timeout: st.Timeout, Priority: st.Priority, Preemptible: st.Preemptible})}
	h := ctx.replay().Call(name, durable.Request{Item: item}, durable.Encoded(name, fn, Permanent))
	return &Future[T]{h: h}
}

// Get waits for the call's result.
func (f *Future[T]) Get() (T, error) {
	var v T
	raw, err := f.h.Wait()
	if err != nil {
		return v, wrapCallError(err)
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return v, fmt.Errorf("decode the result of call %q: %w", f.h.Name(), err)
	}
	return v, nil
}

// Child starts a child task of the workflow ref ("namespace/name", or
// with "@version") with input, as a call of the function, and returns its
// result (the child's final steps' results by name, or for a durable
// function's child, under "function"). The child is started once; a
// failed child fails the call.
func Child[T any](ctx FuncContext, ref string, input any) (T, error) {
	var v T
	_, name, _, err := workflow.ParseRef(ref)
	if err != nil {
		return v, Permanent(fmt.Errorf("child %q: %w", ref, err))
	}
	in, err := json.Marshal(input)
	if err != nil {
		return v, Permanent(fmt.Errorf("input of child %q: %w", ref, err))
	}
	item := durable.Item{Call: durable.CallChild, Step: engine.CallStep(workflow.Step{Workflow: ref, Retry: workflow.RetryPolicy{MaxAttempts: 1}}), Input: in}
	raw, err := ctx.replay().Call(name, durable.Request{Item: item}, nil).Wait()
	if err != nil {
		return v, wrapCallError(err)
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return v, fmt.Errorf("decode the result of child %q: %w", ref, err)
	}
	return v, nil
}

// CallError is the error of a durable function's call that failed for
// good: its step failed, or a signal's wait timed out. A function that
// returns it fails its task at once.
type CallError = durable.CallError

// wrapCallError gives a non-determinism its public error.
func wrapCallError(err error) error {
	var nd *durable.NonDeterminismError
	if errors.As(err, &nd) {
		return fmt.Errorf("%w: %s", ErrNonDeterminism, nd.Msg)
	}
	return err
}
