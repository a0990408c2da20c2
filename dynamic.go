package weft

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/weftrun/weft/internal/dag"
	"github.com/weftrun/weft/internal/expr"
	"github.com/weftrun/weft/store"
)

// This file holds what makes workflows dynamic on the engine's side:
// checking decisions, batches, signal steps, trigger rules and conditions
// in definitions, and turning a handler's result into a decision or a batch.

type addFunc func(step string, line int, field, format string, args ...any)

// validateDynamic checks a step's type, trigger rule, condition, worker and
// signal.
func (w *Workflow) validateDynamic(s Step, add addFunc) {
	switch s.Type {
	case "", StepDecision, StepBatch, StepSignal:
	case StepConverge:
		if s.TriggerRule != "" && s.TriggerRule != NoneFailedMinOneSuccess {
			add(s.Name, s.line, "trigger_rule", "a converge step's rule is %s; leave trigger_rule out", NoneFailedMinOneSuccess)
		}
	default:
		add(s.Name, s.line, "type", "unknown type %q (want decision, converge, batch or signal)", s.Type)
	}
	if !dag.ValidRule(dag.Rule(s.TriggerRule)) {
		add(s.Name, s.line, "trigger_rule", "unknown rule %q (want all_success, all_done, one_success, one_failed, all_failed, none_failed, none_failed_min_one_success or always)", s.TriggerRule)
	}
	if s.When != "" {
		if s.Type == StepSignal {
			add(s.Name, s.line, "when", "a signal step takes no condition")
		} else if _, err := expr.Compile(s.When); err != nil {
			add(s.Name, s.line, "when", "%v", err)
		}
	}
	switch {
	case s.Type == StepBatch && s.Worker == "":
		add(s.Name, s.line, "worker", "a batch step names the template its items run")
	case s.Type == StepBatch && w.template(s.Worker) == nil:
		add(s.Name, s.line, "worker", "no template named %q", s.Worker)
	case s.Type != StepBatch && s.Worker != "":
		add(s.Name, s.line, "worker", "only batch steps have a worker")
	}
	switch {
	case s.Type == StepSignal && s.Handler != "":
		add(s.Name, s.line, "handler", "a signal step runs no handler")
	case s.Type == StepSignal && s.signalName() != "" && !identPattern.MatchString(s.signalName()):
		add(s.Name, s.line, "signal.name", "may hold only letters, digits, '_', '.' and '-'")
	case s.Type != StepSignal && s.Signal != nil:
		add(s.Name, s.line, "signal", "only signal steps wait for a signal")
	}
}

// validateTemplates checks the step templates batch items run.
func (w *Workflow) validateTemplates(add addFunc) {
	seen := map[string]bool{}
	for _, t := range w.Templates {
		field := func(f string) string { return "templates." + f }
		switch {
		case t.Name == "":
			add("", t.line, field("name"), "every template needs a name")
		case !identPattern.MatchString(t.Name):
			add(t.Name, t.line, field("name"), "may hold only letters, digits, '_', '.' and '-'")
		case seen[t.Name]:
			add(t.Name, t.line, field("name"), "duplicate template name")
		}
		seen[t.Name] = true
		if t.Handler == "" {
			add(t.Name, t.line, field("handler"), "is required")
		}
		if len(t.DependsOn) > 0 || t.Type != "" || t.TriggerRule != "" || t.When != "" || t.Worker != "" || t.Signal != nil {
			add(t.Name, t.line, "templates", "a template has only handler, config, retry, timeout, priority and ttl")
		}
		if len(t.Config) > 0 && !json.Valid(t.Config) {
			add(t.Name, t.line, field("config"), "is not valid JSON")
		}
		if err := t.Retry.validate(); err != nil {
			add(t.Name, t.line, field("retry"), "%v", err)
		}
		if check := builtinConfigCheck[t.Handler]; check != nil && (len(t.Config) == 0 || json.Valid(t.Config)) {
			if err := check(t.Config); err != nil {
				add(t.Name, t.line, "templates", "%v", err)
			}
		}
	}
}

// validateDecisionDepth reports steps below more nested decisions than the
// limit allows. The graph is acyclic.
func (w *Workflow) validateDecisionDepth(nodes []dag.Node, limit int, add addFunc) {
	deps, _ := dag.Edges(nodes)
	depth := make([]int, len(nodes)) // decisions above each step, -1: not yet known
	for i := range depth {
		depth[i] = -1
	}
	var visit func(i int) int
	visit = func(i int) int {
		if depth[i] >= 0 {
			return depth[i]
		}
		d := 0
		for _, j := range deps[i] {
			dj := visit(j)
			if w.Steps[j].Type == StepDecision {
				dj++
			}
			d = max(d, dj)
		}
		depth[i] = d
		return d
	}
	for i, s := range w.Steps {
		if visit(i) > limit {
			add(s.Name, s.line, "depends_on", "lies below %d nested decisions, more than limits.max_decision_depth (%d)", depth[i], limit)
		}
	}
}

// children returns the names of the steps that depend directly on step.
func (w *Workflow) children(step string) []string {
	var out []string
	for _, s := range w.Steps {
		if slices.Contains(s.DependsOn, step) {
			out = append(out, s.Name)
		}
	}
	return out
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

// dynamicResult turns the result of a decision or batch step into the
// outcome's decision or spawn. An error is permanent: the result does not
// fit the step's type.
func dynamicResult(w *Workflow, def *Step, result json.RawMessage, o *store.Outcome) error {
	switch def.Type {
	case StepDecision:
		var r struct {
			Branches *[]string `json:"branches"`
		}
		if err := json.Unmarshal(result, &r); err != nil || r.Branches == nil {
			return fmt.Errorf("decision %q must return an object with a \"branches\" list of step names, got %s", def.Name, clip(result))
		}
		children := w.children(def.Name)
		for _, b := range *r.Branches {
			if !slices.Contains(children, b) {
				return fmt.Errorf("decision %q chose %q, which is not one of its direct children %v", def.Name, b, children)
			}
		}
		o.Decide, o.Branches = true, *r.Branches
	case StepBatch:
		var r struct {
			Batches *[]json.RawMessage `json:"batches"`
		}
		if err := json.Unmarshal(result, &r); err != nil || r.Batches == nil {
			return fmt.Errorf("batch %q must return an object with a \"batches\" list, got %s", def.Name, clip(result))
		}
		tpl := w.template(def.Worker)
		if tpl == nil {
			return fmt.Errorf("batch %q: workflow %s has no template %q", def.Name, w.Ref(), def.Worker)
		}
		o.Spawn = &store.Spawn{
			Template: store.StepInsert{Name: tpl.Name, Handler: tpl.Handler, MaxAttempts: tpl.Retry.resolve().MaxAttempts,
				Priority: tpl.Priority, TTL: time.Duration(tpl.TTL)},
			Items:    *r.Batches,
			MaxSteps: w.Limits.resolve().MaxSteps,
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

// Progress records how far the handler got, a fraction from 0 to 1 and a
// message, shown by "weft task". The write is fenced like SaveCheckpoint.
func (a *Attempt) Progress(ctx context.Context, fraction float64, message string) error {
	if err := a.engine.store.SaveProgress(ctx, a.fence, fraction, message); err != nil {
		return fmt.Errorf("save progress of step %q: %w", a.Step, err)
	}
	return nil
}

// Signal sends a named signal with a payload (encoded as JSON; nil means
// null) to a task. The task's first step waiting for that name completes
// with {"signal": name, "payload": payload} as its result; if none waits
// yet, the signal is kept for the next step that begins to. It reports
// whether a waiting step took it at once. A task that has ended is
// ErrConflict.
func (e *Engine) Signal(ctx context.Context, taskID int64, name string, payload any) (bool, error) {
	if !identPattern.MatchString(name) {
		return false, fmt.Errorf("%w signal name %q: use letters, digits, '_', '.' and '-'", ErrInvalid, name)
	}
	var raw json.RawMessage
	if payload == nil {
		raw = json.RawMessage("null")
	} else {
		var err error
		if raw, err = encodeInput(payload); err != nil {
			return false, fmt.Errorf("%w signal payload: %w", ErrInvalid, err)
		}
	}
	delivered, err := e.store.Signal(ctx, taskID, name, raw, e.ID())
	if err != nil {
		return false, fmt.Errorf("weft: signal %q to task %d: %w", name, taskID, err)
	}
	return delivered, nil
}

// stepDef returns the definition a stored step runs: its workflow step, or
// for an item of a batch, its template.
func (w *Workflow) stepDef(s store.Step) *Step {
	if s.Kind == store.KindItem {
		return w.template(s.Template)
	}
	if s.Index < len(w.Steps) && w.Steps[s.Index].Name == s.Name {
		return &w.Steps[s.Index]
	}
	return nil
}

// condition evaluates a step's when condition on its claimed context.
func (e *Engine) condition(src string, c store.ClaimedStep) (bool, error) {
	x, err := e.conds.get(src)
	if err != nil {
		return false, err
	}
	return x.Eval(c.Input, c.Deps)
}
