package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/weftrun/weft/internal/expr"
	"github.com/weftrun/weft/internal/outcome"
	"github.com/weftrun/weft/internal/retry"
	"github.com/weftrun/weft/internal/textsafe"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/workflow"
)

// This file decides what the end of an attempt means, for every step
// whoever ran it (a handler of this engine or a remote worker): a result
// completes the step (or makes its decision or batch), an error fails the
// attempt under the step's retry policy, a snooze waits, and a step whose
// condition is false is skipped. Nothing else in weft turns an attempt into
// an outcome.

// defaultMaxAttempts is the retry policy's default.
const defaultMaxAttempts = 3

// retryPolicy fills in a step's retry policy defaults.
func retryPolicy(p workflow.RetryPolicy) retry.Policy {
	r := retry.Policy{MaxAttempts: p.MaxAttempts, Backoff: p.Backoff, Initial: time.Duration(p.Initial), Max: time.Duration(p.Max)}
	if r.MaxAttempts == 0 {
		r.MaxAttempts = defaultMaxAttempts
	}
	if r.Backoff == "" {
		r.Backoff = retry.Exponential
	}
	if r.Initial == 0 {
		r.Initial = time.Second
	}
	if r.Max == 0 {
		r.Max = time.Hour
	}
	switch {
	case p.Jitter != nil:
		r.Jitter = *p.Jitter
	case r.Backoff == retry.Exponential:
		r.Jitter = 0.1
	}
	return r
}

// failNow marks err as permanent: the step fails without a retry.
func failNow(err error) error { return &outcome.PermanentError{Err: err} }

// timedOut is the error of an attempt that ran past its step's timeout.
func timedOut(d time.Duration) error { return fmt.Errorf("step timed out after %s", d) }

// claimedDefinition returns the workflow of a claimed step and the
// definition the step runs.
func (d *Definitions) claimedDefinition(ctx context.Context, c store.ClaimedStep) (*workflow.Workflow, *workflow.Step, error) {
	w, err := d.get(ctx, c.Namespace, c.Workflow, c.Version)
	if err != nil {
		return nil, nil, fmt.Errorf("definition of %s/%s@%s: %w", c.Namespace, c.Workflow, c.Version, err)
	}
	def := stepDef(w, c.Step)
	if def == nil {
		return nil, nil, fmt.Errorf("definition %s has no step %d (%q): %w", w.Ref(), c.Index, c.Name, store.ErrNotFound)
	}
	return w, def, nil
}

// stepDef returns the definition a stored step runs: its workflow step, or
// for an item of a batch, its template.
func stepDef(w *workflow.Workflow, s store.Step) *workflow.Step {
	if s.Kind == store.KindItem {
		return w.StepTemplate(s.Template)
	}
	if s.Kind == store.KindCall || (s.Kind == store.KindWorkflow && len(s.Item) > 0) {
		return callDefinition(s)
	}
	if s.Index < len(w.Steps) && w.Steps[s.Index].Name == s.Name {
		return &w.Steps[s.Index]
	}
	return nil
}

// undefined is the outcome of a step whose definition could not be loaded:
// a passing database error tries again soon without using up an attempt; a
// definition that does not exist fails the step.
func (d *Definitions) undefined(o store.Outcome, log *stepLog, err error) store.Outcome {
	if !errors.Is(err, store.ErrNotFound) {
		o.State, o.RunAt, o.Snooze, o.Reason = state.StepWaiting, time.Now().Add(time.Second), true, err.Error()
		log.Warn("could not load the workflow definition; retrying", "error", err)
		return storable(o)
	}
	o.State, o.Error = state.StepFailed, err.Error()
	log.Error("step failed", "error", o.Error)
	return storable(o)
}

// gate evaluates the step's when condition before it runs. It returns
// false with the outcome to record when the step must not run: skipped by
// its condition, or failed because the condition could not be evaluated.
func (d *Definitions) gate(o *store.Outcome, log *stepLog, def *workflow.Step, c store.ClaimedStep) (store.Outcome, bool) {
	if def.When == "" {
		return *o, true
	}
	ok, err := d.condition(def.When, c)
	switch {
	case err != nil:
		o.State, o.Error = state.StepFailed, fmt.Sprintf("when: %v", err)
		log.Error("step condition failed", "error", err)
		return storable(*o), false
	case !ok:
		o.State, o.Reason = state.StepSkipped, fmt.Sprintf("when: %s is false", def.When)
		log.Debug("step skipped by its condition")
		return storable(*o), false
	}
	return *o, true
}

// settle returns the outcome of an attempt that ended with a JSON result
// (err nil) or an error: Permanent, RetryAfter and Snooze errors from
// internal/outcome mean what they say, any other error is retried by the
// step's policy.
func (d *Definitions) settle(o store.Outcome, log *stepLog, w *workflow.Workflow, def *workflow.Step, attempt int, result json.RawMessage, err error) store.Outcome {
	if len(result) > 0 {
		// Bytes that are not UTF-8 read as U+FFFD, as encoding/json reads
		// them; a value that cannot be stored at all fails the step for
		// good, before it becomes a decision or a batch.
		result = textsafe.ValidJSON(result)
		if path, perr := textsafe.Find(result); perr != nil && err == nil {
			result, err = nil, failNow(fmt.Errorf("result cannot be stored: %s %v", textsafe.Join("result", path), perr))
		}
	}
	return storable(d.settleAttempt(o, log, w, def, attempt, result, err))
}

// storable returns o with its error and reason fit for a text column of
// every store (see internal/textsafe: a NUL or bytes that are not UTF-8
// become U+FFFD). Every function here that builds an outcome (settle,
// undefined, gate) returns it storable, so the completer writes outcomes
// as they come.
func storable(o store.Outcome) store.Outcome {
	o.Error, o.Reason = textsafe.String(o.Error), textsafe.String(o.Reason)
	return o
}

func (d *Definitions) settleAttempt(o store.Outcome, log *stepLog, w *workflow.Workflow, def *workflow.Step, attempt int, result json.RawMessage, err error) store.Outcome {
	var snooze *outcome.SnoozeError
	var after *outcome.RetryAfterError
	var start *childStart
	var wait *signalWait
	var childErr *childFailed
	var calls *callsMade
	if errors.As(err, &childErr) {
		o.ChildConsumed = true
	}
	switch {
	case errors.As(err, &calls):
		settleCalls(&o, calls)
		log.Debug("function waits for its calls", "calls", len(calls.calls))
		return o
	case errors.As(err, &wait):
		o.State, o.BeginWait, o.Reason = state.StepWaiting, true, wait.Error()
		log.Debug("step waits for its signal")
		return o
	case errors.As(err, &start):
		o.State, o.Child, o.Reason = state.StepWaiting, &start.child, "starting a child task"
		log.Debug("step starts a child task")
		return o
	case err == nil:
		if len(result) == 0 {
			result = json.RawMessage(`null`)
		}
		if derr := dynamicResult(w, def, result, &o); derr != nil {
			o.State, o.Error = state.StepFailed, derr.Error()
			break
		}
		o.State, o.Result = state.StepCompleted, result
		log.Debug("step completed")
		return o
	case errors.As(err, &snooze):
		o.State, o.RunAt, o.Snooze, o.Reason = state.StepWaiting, time.Now().Add(snooze.Delay), true, snooze.Error()
		log.Info("step snoozed", "until", o.RunAt)
		return o
	case errors.As(err, &after):
		failure(&o, def, attempt, err.Error(), outcome.IsPermanent(err), &after.Delay)
	default:
		failure(&o, def, attempt, err.Error(), outcome.IsPermanent(err), nil)
	}
	if o.State == state.StepWaiting {
		log.Warn("step failed, will retry", "error", o.Error, "retry_at", o.RunAt)
	} else {
		log.Error("step failed", "error", o.Error)
	}
	return o
}

// failure sets o to the outcome of a failed attempt under the step's retry
// policy: a failure for good when it is permanent or the attempts are used
// up, else a retry after the delay asked for (after, when not nil) or the
// policy's backoff.
func failure(o *store.Outcome, def *workflow.Step, attempt int, msg string, permanent bool, after *time.Duration) {
	policy := retryPolicy(def.Retry)
	o.Error = msg
	switch {
	case permanent:
		o.State = state.StepFailed
	case policy.Exhausted(attempt):
		o.State, o.Error = state.StepFailed, fmt.Sprintf("%s (attempt %d of %d)", msg, attempt, policy.MaxAttempts)
	case after != nil:
		o.State, o.RunAt = state.StepWaiting, time.Now().Add(*after)
	default:
		o.State, o.RunAt = state.StepWaiting, time.Now().Add(policy.Delay(attempt, rand.Float64))
	}
	if o.State == state.StepWaiting {
		o.Reason = "retry scheduled: " + o.Error
	}
}

// dynamicResult turns the result of a decision or batch step into the
// outcome's decision or spawn. An error is permanent: the result does not
// fit the step's type.
func dynamicResult(w *workflow.Workflow, def *workflow.Step, result json.RawMessage, o *store.Outcome) error {
	switch def.Type {
	case workflow.StepDecision:
		var r struct {
			Branches *[]string `json:"branches"`
		}
		if err := json.Unmarshal(result, &r); err != nil || r.Branches == nil {
			return fmt.Errorf("decision %q must return an object with a \"branches\" list of step names, got %s", def.Name, clip(result))
		}
		children := w.Children(def.Name)
		for _, b := range *r.Branches {
			if !slices.Contains(children, b) {
				return fmt.Errorf("decision %q chose %q, which is not one of its direct children %v", def.Name, b, children)
			}
		}
		o.Decide, o.Branches = true, *r.Branches
	case workflow.StepBatch:
		var r struct {
			Batches *[]json.RawMessage `json:"batches"`
		}
		if err := json.Unmarshal(result, &r); err != nil || r.Batches == nil {
			return fmt.Errorf("batch %q must return an object with a \"batches\" list, got %s", def.Name, clip(result))
		}
		tpl := w.StepTemplate(def.Worker)
		if tpl == nil {
			return fmt.Errorf("batch %q: workflow %s has no template %q", def.Name, w.Ref(), def.Worker)
		}
		o.Spawn = &store.Spawn{
			Template: store.StepInsert{Name: tpl.Name, Handler: tpl.Handler, MaxAttempts: retryPolicy(tpl.Retry).MaxAttempts,
				Priority: tpl.Priority, TTL: time.Duration(tpl.TTL), Timeout: storeTimeout(tpl.Timeout)},
			Items:    *r.Batches,
			MaxSteps: w.Limits.Resolve().MaxSteps,
		}
	}
	return nil
}

func clip(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "…"
	}
	return string(b)
}

// conditions caches compiled step conditions by source.
type conditions struct{ m sync.Map }

func (c *conditions) get(src string) (*expr.Expr, error) {
	if x, ok := c.m.Load(src); ok {
		return x.(*expr.Expr), nil
	}
	x, err := expr.Compile(src)
	if err != nil {
		return nil, err
	}
	c.m.Store(src, x)
	return x, nil
}

// condition evaluates a step's when condition on its claimed context.
func (d *Definitions) condition(src string, c store.ClaimedStep) (bool, error) {
	x, err := d.conds.get(src)
	if err != nil {
		return false, err
	}
	return x.Eval(c.Input, c.Deps)
}
