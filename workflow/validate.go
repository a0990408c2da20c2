package workflow

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/weftrun/weft/internal/builtin"
	"github.com/weftrun/weft/internal/dag"
	"github.com/weftrun/weft/internal/expr"
	"github.com/weftrun/weft/internal/ident"
	"github.com/weftrun/weft/store"
)

// builtinConfigCheck validates the configs of steps run by built-in handlers.
var builtinConfigCheck = map[string]func(json.RawMessage) error{
	"exec": builtin.ValidateExecConfig,
	"http": builtin.ValidateHTTPConfig,
}

// ValidName reports whether s is a valid name for a namespace, workflow,
// version, step or signal: letters, digits, '_', '.' and '-', starting
// with a letter or digit, at most MaxNameLen bytes.
func ValidName(s string) bool { return ident.Valid(s) }

// MaxNameLen bounds a name, in bytes.
const MaxNameLen = ident.MaxLen

// NameError is the name of a list that CheckNames refuses: its index,
// and why.
type NameError struct {
	Index int
	Name  string
	Twice bool // listed twice, else not a valid name
}

func (e *NameError) Error() string {
	if e.Twice {
		return fmt.Sprintf("%q is listed twice", e.Name)
	}
	return fmt.Sprintf("%q is not a valid name (%s)", e.Name, ident.Rule)
}

// CheckNames checks a list of names (namespaces, handlers): each a
// ValidName, none twice. It returns the first refused as a *NameError.
func CheckNames(names []string) error {
	seen := make(map[string]bool, len(names))
	for i, n := range names {
		if !ValidName(n) {
			return &NameError{Index: i, Name: n}
		}
		if seen[n] {
			return &NameError{Index: i, Name: n, Twice: true}
		}
		seen[n] = true
	}
	return nil
}

// ParseRef splits "namespace/name[@version]".
func ParseRef(ref string) (namespace, name, version string, err error) {
	rest, version, _ := strings.Cut(ref, "@")
	namespace, name, ok := strings.Cut(rest, "/")
	if !ok || namespace == "" || name == "" || strings.Contains(name, "/") || strings.HasSuffix(ref, "@") {
		return "", "", "", store.Invalidf("workflow", "%q: want namespace/name or namespace/name@version", ref)
	}
	return namespace, name, version, nil
}

// ParseFilter reads the workflow a filter selects (of tasks, events or
// schedules) with the filter's namespace, the one reading every way in
// shares (REST, the dashboard, the CLI, the Go API). The workflow is
// "namespace/name", or a bare name, which selects that name in the
// namespace given ("" for every namespace). A namespace/name whose
// namespace is not the given one, a version, and anything malformed are
// a store.FieldError of "workflow". It returns the namespace and name to match ("" each
// for any).
func ParseFilter(namespace, wf string) (ns, name string, err error) {
	if wf == "" {
		return namespace, "", nil
	}
	bad := func(why string) error {
		return store.Invalidf("workflow", "%q: %s", wf, why)
	}
	if strings.Contains(wf, "@") {
		return "", "", bad("filters take no version: want NAMESPACE/NAME or NAME")
	}
	ns, name = namespace, wf
	if before, after, ok := strings.Cut(wf, "/"); ok {
		if !ValidName(before) || !ValidName(after) {
			return "", "", bad("want NAMESPACE/NAME or NAME")
		}
		if namespace != "" && namespace != before {
			return "", "", bad(fmt.Sprintf("is not in namespace %q", namespace))
		}
		ns, name = before, after
	}
	if !ValidName(name) {
		return "", "", bad("want NAMESPACE/NAME or NAME")
	}
	return ns, name, nil
}

// DefinitionError describes what is wrong with a workflow definition and
// where: the file and line when it came from a template, and the step.
type DefinitionError struct {
	File  string // template file, if any
	Line  int    // line in File, if known
	Step  string // step name, if the problem is in one step
	Field string // the offending key, if any
	Msg   string
}

func (e *DefinitionError) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		if e.Line > 0 {
			fmt.Fprintf(&b, ":%d", e.Line)
		}
		b.WriteString(": ")
	}
	if e.Step != "" {
		fmt.Fprintf(&b, "step %q: ", e.Step)
	}
	if e.Field != "" {
		fmt.Fprintf(&b, "%s: ", e.Field)
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Validate checks the definition: names, handlers, duplicate steps, unknown
// dependencies, cycles, policies and the configs of steps run by built-in
// handlers. Every problem found is returned, joined.
func (w *Workflow) Validate() error {
	var errs []error
	add := func(step string, line int, field, format string, args ...any) {
		errs = append(errs, &DefinitionError{File: w.source, Line: line, Step: step, Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	for _, f := range []struct{ name, v string }{{"namespace", w.Namespace}, {"name", w.Name}, {"version", w.Version}} {
		if f.v == "" {
			add("", 0, f.name, "is required")
		} else if !ident.Valid(f.v) {
			add("", 0, f.name, "%q: want %s", f.v, ident.Rule)
		}
	}
	switch w.Identity {
	case "", IdentityUnique, IdentityStrict, IdentityCaller:
	default:
		add("", 0, "identity", "unknown strategy %q (want unique, strict or caller)", w.Identity)
	}
	switch w.OnConflict {
	case "", OnConflictReturn, OnConflictSupersede:
	default:
		add("", 0, "on_conflict", "unknown strategy %q (want return or supersede)", w.OnConflict)
	}
	if len(w.Steps) == 0 {
		add("", 0, "steps", "a workflow needs at least one step")
	}
	if w.Limits.MaxDecisionDepth < 0 {
		add("", 0, "limits.max_decision_depth", "must not be negative")
	}
	if w.Limits.MaxSteps < 0 {
		add("", 0, "limits.max_steps", "must not be negative")
	}
	if w.Limits.MaxDepth < 0 {
		add("", 0, "limits.max_depth", "must not be negative")
	} else if w.Limits.MaxDepth > MaxDepthLimit {
		add("", 0, "limits.max_depth", "must be at most %d, got %d", MaxDepthLimit, w.Limits.MaxDepth)
	}
	if w.Limits.MaxChildren < 0 {
		add("", 0, "limits.max_children", "must not be negative")
	} else if w.Limits.MaxChildren > MaxChildrenLimit {
		add("", 0, "limits.max_children", "must be at most %d, got %d", MaxChildrenLimit, w.Limits.MaxChildren)
	}
	limits := w.Limits.Resolve()
	if len(w.Steps) > limits.MaxSteps {
		add("", 0, "steps", "%d steps are more than limits.max_steps (%d)", len(w.Steps), limits.MaxSteps)
	}
	w.Concurrency.validate("", 0, "concurrency", add)
	w.Retention.validate(add)
	w.validateTemplates(add)
	w.validateSchedules(add)
	nodes := make([]dag.Node, 0, len(w.Steps))
	for _, s := range w.Steps {
		if s.Name == "" {
			add("", s.line, "name", "every step needs a name")
		} else if !ident.Valid(s.Name) {
			add(s.Name, s.line, "name", "want %s", ident.Rule)
		}
		w.validateDynamic(s, add)
		if s.Handler == "" && s.Type != StepSignal && s.Type != StepWorkflow {
			add(s.Name, s.line, "handler", "is required")
		}
		if msg := enginesOwn(s.Handler); msg != "" {
			add(s.Name, s.line, "handler", "%s", msg)
		}
		if len(s.Config) > 0 && !json.Valid(s.Config) {
			add(s.Name, s.line, "config", "is not valid JSON")
		}
		if err := s.Retry.validate(); err != nil {
			add(s.Name, s.line, "retry", "%v", err)
		}
		if err := CheckPriority(s.Priority); err != nil {
			add(s.Name, s.line, "priority", "%v", err)
		}
		if s.Type == StepSignal && s.Concurrency != nil {
			add(s.Name, s.Concurrency.line, "concurrency", "a signal step runs nothing to limit")
		}
		s.Concurrency.validate(s.Name, s.line, "concurrency", add)
		if s.Preemptible && (s.Type == StepSignal || s.Type == StepWorkflow) {
			add(s.Name, s.line, "preemptible", "a %s step runs no handler to preempt", s.Type)
		}
		if s.Type == StepSignal && s.RateLimit != nil {
			add(s.Name, s.RateLimit.line, "rate_limit", "a signal step runs nothing to limit")
		}
		s.RateLimit.validate(s.Name, s.line, add)
		s.validateBreaker(add)
		if check := builtinConfigCheck[s.Handler]; check != nil && (len(s.Config) == 0 || json.Valid(s.Config)) {
			if err := check(s.Config); err != nil {
				add(s.Name, s.line, "", "%v", err)
			}
		}
		nodes = append(nodes, dag.Node{Name: s.Name, Deps: s.DependsOn, Line: s.line})
	}
	graphErrs := dag.Validate(nodes)
	for _, e := range graphErrs {
		field := "depends_on"
		if e.Duplicate {
			field = "name"
		}
		add(e.Node, e.Line, field, "%s", e.Msg)
	}
	if len(graphErrs) == 0 {
		w.validateDecisionDepth(nodes, limits.MaxDecisionDepth, add)
	}
	return errors.Join(errs...)
}

// MaxPriority bounds a priority either way, a task's as a step's, so
// that the claim order's aging arithmetic cannot overflow.
const MaxPriority = 1_000_000

// MaxAttempts bounds the attempts of a retry policy.
const MaxAttempts = 1000

// CheckAttempts checks the attempts a durable-function call may take: 0
// (the default, 3) to MaxAttempts.
func CheckAttempts(n int) error {
	if n < 0 || n > MaxAttempts {
		return fmt.Errorf("must be from 0 (the default, 3) to %d, got %d", MaxAttempts, n)
	}
	return nil
}

// CheckPriority checks a priority against MaxPriority.
func CheckPriority(p int) error {
	if p < -MaxPriority || p > MaxPriority {
		return fmt.Errorf("must be from %d to %d, got %d", -MaxPriority, MaxPriority, p)
	}
	return nil
}

func (p RetryPolicy) validate() error {
	if p.MaxAttempts < 0 || p.MaxAttempts > MaxAttempts {
		return fmt.Errorf("max_attempts must be from 1 to %d (0: the default, 3), got %d", MaxAttempts, p.MaxAttempts)
	}
	switch p.Backoff {
	case "", "exponential", "fixed", "linear":
	default:
		return fmt.Errorf("backoff %q is not one of exponential, fixed, linear", p.Backoff)
	}
	if p.Jitter != nil && (*p.Jitter < 0 || *p.Jitter > 1) {
		return fmt.Errorf("jitter must be between 0 and 1, got %v", *p.Jitter)
	}
	if p.Max > 0 && p.Initial > p.Max {
		return fmt.Errorf("initial %s is larger than max %s", time.Duration(p.Initial), time.Duration(p.Max))
	}
	return nil
}

// validate checks a concurrency limit; nil is none. line is where its
// owner is, for a limit built in Go.
func (c *Concurrency) validate(step string, line int, field string, add addFunc) {
	if c == nil {
		return
	}
	if c.line > 0 {
		line = c.line
	}
	if c.Limit < 1 {
		add(step, line, field+".limit", "must be at least 1, got %d", c.Limit)
	}
	if c.Key != "" {
		if c.keyLine > 0 {
			line = c.keyLine
		}
		if _, err := expr.CompileKey(c.Key); err != nil {
			add(step, line, field+".key", "%v", err)
		}
	}
}

type addFunc func(step string, line int, field, format string, args ...any)

// validateDynamic checks a step's type, trigger rule, condition, worker and
// signal.
func (w *Workflow) validateDynamic(s Step, add addFunc) {
	switch s.Type {
	case "", StepDecision, StepBatch, StepSignal:
	case StepWorkflow:
		w.validateSubWorkflow(s, add)
	case StepFunction:
		if len(w.Steps) != 1 {
			add(s.Name, s.line, "type", "a function step is its workflow's only step: its calls become the task's other steps")
		}
		if s.TriggerRule != "" || len(s.DependsOn) > 0 || s.When != "" {
			add(s.Name, s.line, "type", "a function step takes no depends_on, trigger_rule or when")
		}
	case StepConverge:
		if s.TriggerRule != "" && s.TriggerRule != NoneFailedMinOneSuccess {
			add(s.Name, s.line, "trigger_rule", "a converge step's rule is %s; leave trigger_rule out", NoneFailedMinOneSuccess)
		}
	default:
		add(s.Name, s.line, "type", "unknown type %q (want decision, converge, batch, signal, workflow or function)", s.Type)
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
	case s.Type == StepBatch && w.StepTemplate(s.Worker) == nil:
		add(s.Name, s.line, "worker", "no template named %q", s.Worker)
	case s.Type != StepBatch && s.Worker != "":
		add(s.Name, s.line, "worker", "only batch steps have a worker")
	}
	if s.Type != StepWorkflow && (s.Workflow != "" || s.Input != "") {
		add(s.Name, s.line, "workflow", "only workflow steps start a child workflow (type: workflow)")
	}
	switch {
	case s.Type == StepSignal && s.Handler != "":
		add(s.Name, s.line, "handler", "a signal step runs no handler")
	case s.Type == StepSignal && s.SignalName() != "" && !ident.Valid(s.SignalName()):
		add(s.Name, s.line, "signal.name", "%q: want %s", s.SignalName(), ident.Rule)
	case s.Type != StepSignal && s.Signal != nil:
		add(s.Name, s.line, "signal", "only signal steps wait for a signal")
	}
}

// enginesOwn says why handler, if it is one of the engine's built-ins that
// a step's type stands for (EngineStepType), cannot be named; "" otherwise.
func enginesOwn(handler string) string {
	if typ, ok := EngineStepType(handler); ok {
		return fmt.Sprintf("%q is the engine's own: use type: %s", handler, typ)
	}
	return ""
}

// validateTemplates checks the step templates batch items run.
func (w *Workflow) validateTemplates(add addFunc) {
	seen := map[string]bool{}
	for _, t := range w.Templates {
		field := func(f string) string { return "templates." + f }
		switch {
		case t.Name == "":
			add("", t.line, field("name"), "every template needs a name")
		case !ident.Valid(t.Name):
			add(t.Name, t.line, field("name"), "want %s", ident.Rule)
		case seen[t.Name]:
			add(t.Name, t.line, field("name"), "duplicate template name")
		}
		seen[t.Name] = true
		if t.Handler == "" {
			add(t.Name, t.line, field("handler"), "is required")
		}
		if msg := enginesOwn(t.Handler); msg != "" {
			add(t.Name, t.line, field("handler"), "%s", msg)
		}
		if len(t.DependsOn) > 0 || t.Type != "" || t.TriggerRule != "" || t.When != "" || t.Worker != "" || t.Signal != nil || t.Concurrency != nil || t.Preemptible || t.RateLimit != nil || t.CircuitBreaker != nil {
			add(t.Name, t.line, "templates", "a template has only handler, config, retry, timeout, priority and ttl")
		}
		if len(t.Config) > 0 && !json.Valid(t.Config) {
			add(t.Name, t.line, field("config"), "is not valid JSON")
		}
		if err := t.Retry.validate(); err != nil {
			add(t.Name, t.line, field("retry"), "%v", err)
		}
		if err := CheckPriority(t.Priority); err != nil {
			add(t.Name, t.line, field("priority"), "%v", err)
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

// Children returns the names of the steps that depend directly on step.
func (w *Workflow) Children(step string) []string {
	var out []string
	for _, s := range w.Steps {
		if slices.Contains(s.DependsOn, step) {
			out = append(out, s.Name)
		}
	}
	return out
}

// validateSubWorkflow checks a workflow step: no handler, a workflow
// reference and an input expression that compiles.
func (w *Workflow) validateSubWorkflow(s Step, add addFunc) {
	if s.Handler != "" {
		add(s.Name, s.line, "handler", "a workflow step runs no handler: it starts a child task of its workflow")
	}
	if s.Workflow == "" {
		add(s.Name, s.line, "workflow", "a workflow step names the workflow its child runs (namespace/name[@version])")
	} else if ns, name, version, err := ParseRef(s.Workflow); err != nil {
		add(s.Name, s.line, "workflow", "%q: want namespace/name or namespace/name@version", s.Workflow)
	} else if ns == w.Namespace && name == w.Name && (version == "" || version == w.Version) {
		add(s.Name, s.line, "workflow", "a workflow cannot start a child of itself")
	}
	if s.Input != "" {
		if _, err := expr.CompileValue(s.Input); err != nil {
			add(s.Name, s.line, "input", "%v", err)
		}
	}
}

// validateBreaker checks a step's circuit breaker; nil is none.
func (s Step) validateBreaker(add addFunc) {
	b := s.CircuitBreaker
	if b == nil {
		return
	}
	line := s.line
	if b.line > 0 {
		line = b.line
	}
	switch s.Type {
	case StepSignal:
		add(s.Name, line, "circuit_breaker", "a signal step runs nothing that could fail")
	case StepWorkflow:
		add(s.Name, line, "circuit_breaker", "a workflow step runs nothing itself: give its child's steps breakers")
	}
	if b.Failures < 1 || b.Failures > store.MaxBreakerFailures {
		add(s.Name, line, "circuit_breaker.failures", "must be 1 to %d, got %d", store.MaxBreakerFailures, b.Failures)
	}
	if d := time.Duration(b.Cooldown); d < time.Millisecond || d > store.MaxBreakerCooldown {
		add(s.Name, line, "circuit_breaker.cooldown", "must be at least 1ms and at most %s, got %s", store.MaxBreakerCooldown, d)
	}
}
