package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/weftrun/weft/internal/ident"

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
// the code this engine's run of the function made (functionCache), or
// replays the function up to it; a sleep is a call step that waits until
// its time and then completes.

// HandleFunction registers the handler of a durable function: its task's
// function step and its step and sleep calls all run it.
func (e *Engine) HandleFunction(name string, fn durable.Func) {
	e.Handle(name, func(ctx context.Context, r *Run) (any, error) { return e.funcs.run(ctx, r, fn) })
}

// functions runs the steps of durable functions' tasks on this engine,
// with what its runs of them made (functionCache): a function step replays
// its function over the calls its task recorded (journal); a call runs the
// code a run made, or replays the function up to it.
type functions struct {
	functionCache
	store store.Store
	defs  *Definitions
}

// run runs one step of a durable function's task.
func (f *functions) run(ctx context.Context, r *Run, fn durable.Func) (any, error) {
	c := r.claimed
	if c.Kind == store.KindCall {
		var item durable.Item
		if err := json.Unmarshal(c.Item, &item); err != nil {
			return nil, failNow(fmt.Errorf("call %q: its item is not a call: %w", c.Name, err))
		}
		if item.Call == durable.CallSleep {
			return nil, nil // its time has come
		}
		if run, ok := f.calls.take(pendingCall{c.TaskID, c.Name}); ok {
			return run(ctx) // made by this engine's run of the function
		}
	} else if c.Kind != store.KindFunction {
		return nil, failNow(fmt.Errorf("step %q of kind %q is not a durable function's", c.Name, c.Kind))
	}
	var journal []durable.Recorded
	if c.Kind == store.KindCall || !f.isNew(c) {
		var err error
		if journal, err = f.journal(ctx, c.TaskID); err != nil {
			return nil, err
		}
	}
	if c.Kind == store.KindCall {
		return durable.RunCall(ctx, c.TaskID, journal, c.Name, fn, c.Input)
	}
	out := durable.Drive(ctx, c.TaskID, journal, fn, c.Input)
	switch {
	case len(out.Calls) > 0:
		err := f.madeCalls(ctx, c, len(journal), out.Calls)
		var made *callsMade
		if errors.As(err, &made) {
			f.made(fn, *c, journal, out.Calls)
		}
		return nil, err
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

// sleepEnds reports whether c is a durable sleep, which ends when it is
// claimed (its time has come) and runs no code.
func sleepEnds(c store.ClaimedStep) bool {
	if c.Kind != store.KindCall {
		return false
	}
	var item durable.Item
	return json.Unmarshal(c.Item, &item) == nil && item.Call == durable.CallSleep
}

// madeCalls is the error by which the function step c, whose task
// recorded journaled calls, waits for its new calls: within its
// workflow's step limit, or failing for good.
func (f *functions) madeCalls(ctx context.Context, c *store.ClaimedStep, journaled int, calls []durable.Request) error {
	w, err := f.defs.get(ctx, c.Namespace, c.Workflow, c.Version)
	if err != nil {
		return err
	}
	if limit := w.Limits.Resolve().MaxSteps; 1+journaled+len(calls) > limit {
		return failNow(fmt.Errorf("the function made %d calls: its task would have more than %d steps (limits.max_steps)",
			journaled+len(calls), limit))
	}
	return &callsMade{calls: callInserts(c, calls)}
}

// FunctionCall is a new call that a remote worker's run of a durable
// function made (see wire.Call).
type FunctionCall struct {
	Name string
	// Kind is durable.CallStep, CallSleep, CallSignal or CallChild.
	Kind        string
	Sleep       time.Duration
	Signal      string
	Timeout     time.Duration
	MaxAttempts int
	Priority    int
	Workflow    string
	Input       json.RawMessage
}

// CallsRemote records the new calls a remote worker's run of the function
// step f made: the step waits for them. Each is checked (field
// calls[i].…) against the calls its task recorded: a name must be new.
func (ws *Workers) CallsRemote(ctx context.Context, workerID, owner string, f store.Fence, calls []FunctionCall) (store.Outcome, error) {
	c, err := ws.held(ctx, workerID, owner, f)
	if err != nil {
		return store.Outcome{}, err
	}
	if c.Kind != store.KindFunction {
		return store.Outcome{}, store.Invalidf("calls", "step %q is not a durable function's function step", c.Name)
	}
	if len(calls) == 0 {
		return store.Outcome{}, store.Invalidf("calls", "lists no call: report a function that returned with complete")
	}
	journal, err := ws.e.funcs.journal(ctx, c.TaskID)
	if err != nil {
		return store.Outcome{}, err
	}
	taken := make(map[string]bool, len(journal)+len(calls))
	for _, r := range journal {
		taken[r.Name] = true
	}
	reqs := make([]durable.Request, len(calls))
	for i, fc := range calls {
		field := func(name string) string { return fmt.Sprintf("calls[%d].%s", i, name) }
		base, n, counted := strings.Cut(fc.Name, "[")
		if !workflow.ValidName(base) || (counted && !validCount(n)) {
			return store.Outcome{}, store.Invalidf(field("name"), "%q: use %s, and a count in brackets for a name used again", fc.Name, ident.Rule)
		}
		if taken[fc.Name] {
			return store.Outcome{}, store.Invalidf(field("name"), "%q: the task has a call of that name", fc.Name)
		}
		taken[fc.Name] = true
		if err := workflow.CheckAttempts(fc.MaxAttempts); err != nil {
			return store.Outcome{}, store.Invalidf(field("max_attempts"), "%v", err)
		}
		if err := workflow.CheckPriority(fc.Priority); err != nil {
			return store.Outcome{}, store.Invalidf(field("priority"), "%v", err)
		}
		if fc.Timeout < 0 || fc.Sleep < 0 {
			return store.Outcome{}, store.Invalidf(field("timeout_ms"), "a duration must not be negative")
		}
		req := durable.Request{Name: fc.Name, Item: durable.Item{Call: fc.Kind}}
		switch fc.Kind {
		case durable.CallStep:
			req.Item.Step = CallStep(workflow.Step{Retry: workflow.RetryPolicy{MaxAttempts: fc.MaxAttempts}, Timeout: workflow.Duration(fc.Timeout), Priority: fc.Priority})
		case durable.CallSleep:
			if fc.Sleep <= 0 {
				return store.Outcome{}, store.Invalidf(field("sleep_ms"), "a sleep lasts more than 0 ms")
			}
			req.Until = time.Now().Add(fc.Sleep)
		case durable.CallSignal:
			if !workflow.ValidName(fc.Signal) {
				return store.Outcome{}, store.Invalidf(field("signal"), "%q: use %s", fc.Signal, ident.Rule)
			}
			req.Signal, req.Timeout = fc.Signal, fc.Timeout
		case durable.CallChild:
			if _, _, _, err := workflow.ParseRef(fc.Workflow); err != nil {
				return store.Outcome{}, store.Invalidf(field("workflow"), "%v", err)
			}
			input := fc.Input
			if len(input) == 0 {
				input = json.RawMessage(`{}`)
			}
			if !json.Valid(input) {
				return store.Outcome{}, store.Invalidf(field("input"), "is not JSON")
			}
			req.Item.Step = CallStep(workflow.Step{Workflow: fc.Workflow, Retry: workflow.RetryPolicy{MaxAttempts: 1}})
			req.Item.Input = input
		default:
			return store.Outcome{}, store.Invalidf(field("kind"), "%q is not step, sleep, signal or child", fc.Kind)
		}
		reqs[i] = req
	}
	made := ws.e.funcs.madeCalls(ctx, &c, len(journal), reqs)
	return ws.reportHeld(ctx, workerID, c, nil, made)
}

// validCount reports whether s is "N]" for a count N of 2 or more.
func validCount(s string) bool {
	digits, ok := strings.CutSuffix(s, "]")
	n, err := strconv.Atoi(digits)
	return ok && err == nil && n >= 2 && strconv.Itoa(n) == digits
}

// journal returns the calls the task recorded: its steps besides its
// function step, in the order they were made.
func (f *functions) journal(ctx context.Context, taskID int64) ([]durable.Recorded, error) {
	t, err := f.store.GetTask(ctx, taskID)
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
func callInserts(c *store.ClaimedStep, calls []durable.Request) []store.StepInsert {
	inserts := make([]store.StepInsert, len(calls))
	for i, req := range calls {
		in := store.StepInsert{Name: req.Name, Handler: c.Handler, Kind: store.KindCall, MaxAttempts: 1}
		if st := callOptions(req.Item); st != nil {
			in.MaxAttempts, in.Priority, in.Timeout, in.Preemptible = retryPolicy(st.Retry).MaxAttempts, st.Priority, storeTimeout(st.Timeout), st.Preemptible
		}
		switch req.Item.Call {
		case durable.CallSleep:
			// No code runs, but the function's next calls may be replayed
			// in its attempt (resume.go): a claim lost with its engine is
			// claimed again.
			in.RunAt, in.MaxAttempts = req.Until, defaultMaxAttempts
		case durable.CallSignal:
			in.Kind, in.Handler, in.Signal, in.SignalTimeout = store.KindSignal, store.SignalHandler, req.Signal, req.Timeout
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
	if st := callOptions(item); st != nil {
		def = *st
		def.Name, def.Handler = s.Name, s.Handler
	}
	if item.Call == durable.CallChild {
		def.Type = workflow.StepWorkflow
	}
	return &def
}

// CallStep is a call's options (or a child's workflow) as its item
// records them.
func CallStep(st workflow.Step) json.RawMessage {
	b, _ := json.Marshal(st) // a workflow.Step always encodes
	return b
}

// callOptions are the options an item records, nil for none.
func callOptions(item durable.Item) *workflow.Step {
	if len(item.Step) == 0 {
		return nil
	}
	var st workflow.Step
	if json.Unmarshal(item.Step, &st) != nil {
		return nil
	}
	return &st
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
