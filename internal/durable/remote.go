package durable

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/weftrun/weft/wire"
)

// This file is the wire side of durable functions, for remote workers
// (package client, the model test's worker): the journal a claim carries,
// and the calls a run reports. For them, Item.Step holds a step call's or
// a child's options as a wire.Call (the engine's hold a workflow.Step).

// Journal is the journal a claimed step carries. A call that succeeded
// without a result (absent: null) returns null.
func Journal(calls []wire.RecordedCall) []Recorded {
	out := make([]Recorded, len(calls))
	for i, c := range calls {
		out[i] = Recorded{Name: c.Name, Call: c.Kind, Ended: c.Ended, Succeeded: c.OK, Result: c.Result, Error: c.Error}
		if c.Ended && c.OK && len(c.Result) == 0 {
			out[i].Result = json.RawMessage("null")
		}
	}
	return out
}

// WireRecorded is a recorded call as a claim carries it: a null result is
// absent.
func WireRecorded(r Recorded) wire.RecordedCall {
	out := wire.RecordedCall{Name: r.Name, Kind: r.Call, Ended: r.Ended, OK: r.Succeeded, Result: r.Result, Error: r.Error}
	if string(r.Result) == "null" {
		out.Result = nil
	}
	return out
}

// WireCall is a new call as the server takes it: the options noted in its
// item (a wire.Call), its name, kind and times.
func WireCall(c Request) wire.Call {
	var out wire.Call
	if len(c.Item.Step) > 0 {
		_ = json.Unmarshal(c.Item.Step, &out)
	}
	out.Name, out.Kind, out.Input = c.Name, c.Item.Call, c.Item.Input
	switch c.Item.Call {
	case CallSleep:
		out.SleepMS = max(1, time.Until(c.Until).Milliseconds())
	case CallSignal:
		out.Signal, out.TimeoutMS = c.Signal, c.Timeout.Milliseconds()
	}
	return out
}

// ErrWaiting is RunRemote's error for a function step that ran while a
// call it waits for has not ended (an operator reopened it): the worker
// snoozes the step (fail with snooze_ms), which uses no attempt.
var ErrWaiting = errors.New("the function waits for a call that has not ended")

// RunRemote runs a durable function's claimed step on a remote worker: a
// function step (kind "function") replays fn over the claim's journal and
// returns the new calls to report or the function's result; a call's step
// (kind "call") returns its code's result. An error that running again
// cannot change satisfies IsPermanent.
func RunRemote(ctx context.Context, step wire.ClaimedStep, fn Func) (calls []wire.Call, result json.RawMessage, err error) {
	journal := Journal(step.Calls)
	switch step.Kind {
	case "call":
		result, err = RunCall(ctx, step.TaskID, journal, step.Step, fn, step.Input)
		return nil, result, err
	case "function":
		out := Drive(ctx, step.TaskID, journal, fn, step.Input)
		switch {
		case len(out.Calls) > 0:
			calls = make([]wire.Call, len(out.Calls))
			for i, c := range out.Calls {
				calls[i] = WireCall(c)
			}
			return calls, nil, nil
		case out.Waiting:
			return nil, nil, ErrWaiting
		}
		return nil, out.Value, out.Err
	}
	return nil, nil, permanent{fmt.Errorf("step %q is not a durable function's (its workflow's step must be of type function)", step.Step)}
}
