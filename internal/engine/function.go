package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/weftrun/weft/internal/durable"
	"github.com/weftrun/weft/internal/outcome"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/workflow"
)

// This file runs durable functions (internal/durable) as steps: the
// function step of a task replays the function over the calls its task
// recorded, and the calls it makes anew become steps of the task
// (store.Outcome.Calls) that the function step waits for. A step call runs
// its code by replaying the function up to it; a sleep is a call step that
// waits until its time and then completes.

// HandleFunction registers the handler of a durable function: its task's
// function step and its step and sleep calls all run it.
func (e *Engine) HandleFunction(name string, fn durable.Func) {
	e.Handle(name, func(ctx context.Context, r *Run) (any, error) { return e.runFunction(ctx, r, fn) })
}

// runFunction runs one step of a durable function's task.
func (e *Engine) runFunction(ctx context.Context, r *Run, fn durable.Func) (any, error) {
	c := r.claimed
	var item durable.Item
	if c.Kind == store.KindCall {
		if err := json.Unmarshal(c.Item, &item); err != nil {
			return nil, failNow(fmt.Errorf("call %q: its item is not a call: %w", c.Name, err))
		}
		if item.Call == durable.CallSleep {
			return nil, nil // its time came: the sleep ends
		}
	} else if c.Kind != store.KindFunction {
		return nil, failNow(fmt.Errorf("step %q of kind %q is not a durable function's", c.Name, c.Kind))
	}
	journal, err := e.journal(ctx, c.TaskID)
	if err != nil {
		return nil, err
	}
	if c.Kind == store.KindCall {
		return durable.RunCall(ctx, c.TaskID, journal, c.Name, fn, c.Input)
	}
	out := durable.Drive(ctx, c.TaskID, journal, fn, c.Input)
	switch {
	case len(out.Calls) > 0:
		w, err := e.defs.get(ctx, c.Namespace, c.Workflow, c.Version)
		if err != nil {
			return nil, err
		}
		if limit := w.Limits.Resolve().MaxSteps; 1+len(journal)+len(out.Calls) > limit {
			return nil, failNow(fmt.Errorf("the function made %d calls: its task would have more than %d steps (limits.max_steps)",
				len(journal)+len(out.Calls), limit))
		}
		return nil, &callsMade{calls: e.callInserts(c, out.Calls)}
	case out.Waiting:
		// An operator retried a call the function waits for: look again
		// once it may have ended.
		return nil, &outcome.SnoozeError{Delay: time.Second}
	}
	if out.Err != nil && durable.IsPermanent(out.Err) {
		return nil, failNow(out.Err)
	}
	return out.Value, out.Err
}

// journal returns the calls the task recorded: its steps besides its
// function step, in the order they were made.
func (e *Engine) journal(ctx context.Context, taskID int64) ([]durable.Recorded, error) {
	t, err := e.store.GetTask(ctx, taskID)
	if err != nil {
		return nil, fmt.Errorf("read the calls of task %d: %w", taskID, err)
	}
	var journal []durable.Recorded
	for _, s := range t.Steps {
		if s.Kind == store.KindFunction {
			continue
		}
		rec := durable.Recorded{Name: s.Name, Ended: s.State.Terminal(), Succeeded: s.State.Succeeded(), Result: s.Result, Error: s.Error}
		switch s.Kind {
		case store.KindSignal:
			rec.Call = durable.CallSignal
		case store.KindWorkflow:
			rec.Call = durable.CallChild
		default:
			var item durable.Item
			if err := json.Unmarshal(s.Item, &item); err != nil {
				return nil, failNow(fmt.Errorf("step %q of task %d is not a call: %w", s.Name, taskID, err))
			}
			rec.Call = item.Call
		}
		if rec.Ended && !rec.Succeeded && rec.Error == "" {
			rec.Error = string(s.State)
		}
		journal = append(journal, rec)
	}
	return journal, nil
}

// callInserts turns a function's new calls into the steps to create.
func (e *Engine) callInserts(c *store.ClaimedStep, calls []durable.Request) []store.StepInsert {
	inserts := make([]store.StepInsert, len(calls))
	for i, req := range calls {
		in := store.StepInsert{Name: req.Name, Handler: c.Handler, Kind: store.KindCall, MaxAttempts: 1}
		if st := req.Item.Step; st != nil {
			in.MaxAttempts, in.Priority, in.Timeout, in.Preemptible = retryPolicy(st.Retry).MaxAttempts, st.Priority, storeTimeout(st.Timeout), st.Preemptible
		}
		switch req.Item.Call {
		case durable.CallSleep:
			in.RunAt = req.Until
		case durable.CallSignal:
			in.Kind, in.Handler, in.Signal, in.SignalTimeout = store.KindSignal, "", req.Signal, req.Timeout
		case durable.CallChild:
			in.Kind, in.Handler = store.KindWorkflow, workflow.SubWorkflowHandler
		}
		if req.Item.Call != durable.CallSignal {
			in.Item, _ = json.Marshal(req.Item)
		}
		inserts[i] = in
	}
	return inserts
}

// callsMade is what a function step returns that made new calls: it waits
// for them (settleAttempt).
type callsMade struct{ calls []store.StepInsert }

func (c *callsMade) Error() string {
	names := make([]string, len(c.calls))
	for i, in := range c.calls {
		names[i] = in.Name
	}
	return "waiting for call(s) " + strings.Join(names, ", ")
}

// callDefinition returns the definition a call step runs: its item's.
func callDefinition(s store.Step) *workflow.Step {
	var item durable.Item
	if json.Unmarshal(s.Item, &item) != nil {
		return nil
	}
	def := workflow.Step{Name: s.Name, Handler: s.Handler}
	if item.Step != nil {
		def = *item.Step
		def.Name, def.Handler = s.Name, s.Handler
	}
	if item.Call == durable.CallChild {
		def.Type = workflow.StepWorkflow
	}
	return &def
}

// callInput is the input of a child call, if s is one.
func callInput(s store.Step) (json.RawMessage, bool) {
	if len(s.Item) == 0 {
		return nil, false
	}
	var item durable.Item
	if json.Unmarshal(s.Item, &item) != nil || item.Call != durable.CallChild {
		return nil, false
	}
	return item.Input, true
}

// settleCalls sets o to the outcome of a function step that made calls.
func settleCalls(o *store.Outcome, made *callsMade) {
	o.State, o.Calls, o.Snooze, o.Reason = state.StepWaiting, made.calls, true, made.Error()
}
