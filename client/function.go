package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/weftrun/weft/internal/durable"
	"github.com/weftrun/weft/wire"
	"github.com/weftrun/weft/wire/weftv1"
)

// Function is a durable function as a remote worker runs it: ordinary Go
// whose calls through f are steps of its task, recorded by the server.
// The task's function step runs it from the top each time: a call that has
// ended returns its recorded result without running again, and the first
// new calls become steps of the task, which the function step waits for,
// holding no slot. Its result is encoded as JSON. See docs/functions.md
// and docs/remote-workers.md (the protocol).
type Function func(f *FunctionRun, input json.RawMessage) (any, error)

// HandleFunction serves the durable function whose workflow's function
// step (type function) has handler name. Call it before Run.
func (w *GRPCWorker) HandleFunction(name string, fn Function) { w.handlers[name] = functionHandler(fn) }

// FunctionRun is one run of a durable function: its calls. Make them from
// the function's goroutine; run calls in parallel with Go.
type FunctionRun struct {
	r *durable.Replay
}

// Context is the context of the run's step.
func (f *FunctionRun) Context() context.Context { return f.r.Context() }

// TaskID is the function's task.
func (f *FunctionRun) TaskID() int64 { return f.r.TaskID }

// CallOptions are a step call's: its attempts (0: the default, 3), its
// timeout per attempt and its priority.
type CallOptions struct {
	MaxAttempts int
	Timeout     time.Duration
	Priority    int
}

// Step runs fn as a step of the task named name and returns its result as
// JSON: recorded once fn succeeded, it is returned without running fn
// again. A call whose step failed for good returns a *CallError.
func (f *FunctionRun) Step(name string, fn func(ctx context.Context) (any, error), opts ...CallOptions) (json.RawMessage, error) {
	return f.Go(name, fn, opts...).Wait()
}

// Call is a call made with Go.
type Call struct{ h *durable.Handle }

// Wait returns the call's result, once it has ended.
func (c *Call) Wait() (json.RawMessage, error) { return c.h.Wait() }

// Go is Step without waiting: calls made with Go run in parallel.
func (f *FunctionRun) Go(name string, fn func(ctx context.Context) (any, error), opts ...CallOptions) *Call {
	var o CallOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	// The worker's own note of the options, for wireCall.
	step, _ := json.Marshal(wire.Call{MaxAttempts: o.MaxAttempts, TimeoutMS: o.Timeout.Milliseconds(), Priority: o.Priority})
	h := f.r.Call(name, durable.Request{Item: durable.Item{Call: durable.CallStep, Step: step}}, durable.Encoded(name, fn, Permanent))
	return &Call{h: h}
}

// Sleep waits durably for d, holding no slot.
func (f *FunctionRun) Sleep(d time.Duration) error {
	_, err := f.r.Call("sleep", durable.Request{Item: durable.Item{Call: durable.CallSleep}, Until: time.Now().Add(d)}, nil).Wait()
	return err
}

// WaitSignal waits durably for the signal name and returns its payload; a
// timeout above zero bounds the wait (past it, a *CallError).
func (f *FunctionRun) WaitSignal(name string, timeout time.Duration) (json.RawMessage, error) {
	raw, err := f.r.Call(name, durable.Request{Item: durable.Item{Call: durable.CallSignal}, Signal: name, Timeout: timeout}, nil).Wait()
	if err != nil {
		return nil, err
	}
	var got struct {
		Payload json.RawMessage `json:"payload"`
	}
	if err := json.Unmarshal(raw, &got); err != nil {
		return nil, fmt.Errorf("signal %q: %w", name, err)
	}
	return got.Payload, nil
}

// Child starts a child task of the workflow ref ("namespace/name", or
// with "@version") with input and returns its result.
func (f *FunctionRun) Child(ref string, input any) (json.RawMessage, error) {
	in, err := json.Marshal(input)
	if err != nil {
		return nil, Permanent(fmt.Errorf("input of child %q: %w", ref, err))
	}
	name := ref[strings.LastIndexByte(ref, '/')+1:]
	name, _, _ = strings.Cut(name, "@")
	step, _ := json.Marshal(wire.Call{Workflow: ref})
	return f.r.Call(name, durable.Request{Item: durable.Item{Call: durable.CallChild, Step: step, Input: in}}, nil).Wait()
}

// CallError is the error of a call that failed for good. A function that
// returns it fails its task at once.
type CallError = durable.CallError

// callsMade is the outcome of a function step that made new calls: the
// worker reports them (Calls) instead of a result.
type callsMade struct{ calls []wire.Call }

func (c callsMade) Error() string { return fmt.Sprintf("made %d call(s)", len(c.calls)) }

// functionHandler runs a durable function's steps: the function step
// replays it over the recorded calls; a call's step replays it up to the
// call and runs the call's code.
func functionHandler(fn Function) StepHandler {
	run := func(r *durable.Replay, input json.RawMessage) (json.RawMessage, error) {
		v, err := fn(&FunctionRun{r: r}, input)
		if err != nil {
			return nil, err
		}
		b, err := json.Marshal(v)
		if err != nil {
			return nil, Permanent(fmt.Errorf("result is not JSON-encodable: %w", err))
		}
		return b, nil
	}
	return func(ctx context.Context, step wire.ClaimedStep) (json.RawMessage, error) {
		calls, result, err := durable.RunRemote(ctx, step, run)
		switch {
		case len(calls) > 0:
			return nil, callsMade{calls: calls}
		case errors.Is(err, durable.ErrWaiting):
			return nil, Snooze(time.Second, err.Error())
		case err != nil && durable.IsPermanent(err):
			return nil, Permanent(err)
		}
		return result, err
	}
}

// callsRequest is the report of a function step's new calls.
func callsRequest(workerID string, fence *weftv1.Fence, calls []wire.Call) *weftv1.CallsRequest {
	out := &weftv1.CallsRequest{WorkerId: workerID, Fence: fence}
	for _, c := range calls {
		out.Calls = append(out.Calls, &weftv1.Call{Name: c.Name, Kind: c.Kind, SleepMs: c.SleepMS, Signal: c.Signal, TimeoutMs: c.TimeoutMS,
			MaxAttempts: int32(c.MaxAttempts), Priority: int32(c.Priority), Workflow: c.Workflow, Input: c.Input})
	}
	return out
}
