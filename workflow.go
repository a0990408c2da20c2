package weft

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/weftrun/weft/internal/dag"
)

// Workflow is a versioned definition namespace/name@version: a directed
// acyclic graph of steps. Build one with NewWorkflow or load one from a YAML
// template with ParseTemplate.
type Workflow struct {
	Namespace   string `json:"namespace"`
	Name        string `json:"name"`
	Version     string `json:"version"`
	Description string `json:"description,omitempty"`
	// Identity decides how submissions are deduplicated; see Identity.
	Identity Identity `json:"identity,omitempty"`
	Steps    []Step   `json:"steps"`
	// Templates are step definitions that batch steps create items from
	// (Step.Worker names one); they are not steps of the graph themselves.
	Templates []Step `json:"templates,omitempty"`
	// Limits bound what a task of the workflow may grow to.
	Limits Limits `json:"limits,omitempty"`

	// source names where the definition came from (a file), for errors.
	source string
}

// Step is one node of a workflow's DAG.
type Step struct {
	Name      string          `json:"name"`
	Handler   string          `json:"handler"`
	Config    json.RawMessage `json:"config,omitempty"`
	DependsOn []string        `json:"depends_on,omitempty"`
	Retry     RetryPolicy     `json:"retry,omitempty"`
	// Timeout bounds one attempt; the handler's context is cancelled when it
	// passes. Zero means no timeout.
	Timeout Duration `json:"timeout,omitempty"`
	// Priority orders ready steps: higher runs first. Waiting steps age, so
	// old low-priority work is not starved.
	Priority int `json:"priority,omitempty"`
	// TTL is how long the step may stay ready without starting before it
	// expires. Zero means forever.
	TTL Duration `json:"ttl,omitempty"`
	// Type is "" (a plain step) or one of the StepType constants.
	Type StepType `json:"type,omitempty"`
	// TriggerRule decides from the outcomes of the step's dependencies
	// whether it runs or is skipped; "" means all_success.
	TriggerRule TriggerRule `json:"trigger_rule,omitempty"`
	// When is a condition (see docs/workflows.md) over the task input and
	// the dependencies' results, checked once the trigger rule lets the
	// step run: when it is false the step is skipped.
	When string `json:"when,omitempty"`
	// Worker names the template (Workflow.Templates) a batch step's items
	// run.
	Worker string `json:"worker,omitempty"`
	// Signal is what a signal step waits for.
	Signal *SignalWait `json:"signal,omitempty"`

	line int // line in the source template, for errors
}

// StepType says how a step behaves beyond running its handler.
type StepType string

// Step types.
const (
	// StepDecision: the handler returns {"branches": [...]}, naming which
	// of the step's direct children run; the others are skipped, and so
	// are their descendants unless their trigger rules say otherwise.
	StepDecision StepType = "decision"
	// StepConverge: the step runs once the branches that ran before it
	// have finished, with their results (trigger rule
	// none_failed_min_one_success).
	StepConverge StepType = "converge"
	// StepBatch: the handler returns {"batches": [...]}; one item step
	// per entry is created from the Worker template, each seeing its entry
	// as Attempt.Batch, and the step's children get the items' results in
	// order, as a JSON array under the batch step's name.
	StepBatch StepType = "batch"
	// StepSignal: the step runs no handler. It waits durably, holding no
	// slot, for the signal named in Signal (sent with Engine.Signal or
	// "weft signal"); its result is {"signal": name, "payload": ...}. It
	// fails when its timeout passes first.
	StepSignal StepType = "signal"
)

// TriggerRule decides, from the outcomes of a step's dependencies, whether
// it runs or is skipped, with Airflow's semantics (see docs/workflows.md).
type TriggerRule string

// Trigger rules.
const (
	AllSuccess              TriggerRule = TriggerRule(dag.AllSuccess)
	AllDone                 TriggerRule = TriggerRule(dag.AllDone)
	OneSuccess              TriggerRule = TriggerRule(dag.OneSuccess)
	OneFailed               TriggerRule = TriggerRule(dag.OneFailed)
	AllFailed               TriggerRule = TriggerRule(dag.AllFailed)
	NoneFailed              TriggerRule = TriggerRule(dag.NoneFailed)
	NoneFailedMinOneSuccess TriggerRule = TriggerRule(dag.NoneFailedMinOneSuccess)
	Always                  TriggerRule = TriggerRule(dag.Always)
)

// SignalWait is what a signal step waits for.
type SignalWait struct {
	// Name is the signal's name; "" means the step's name.
	Name string `json:"name,omitempty"`
	// Timeout bounds the wait from the moment the step's dependencies
	// allow it; zero means forever.
	Timeout Duration `json:"timeout,omitempty"`
}

// Limits bound a task of a workflow, so that a runaway graph stops with a
// clear error.
type Limits struct {
	// MaxDecisionDepth bounds how many decisions may nest on one path
	// through the graph. Zero means DefaultMaxDecisionDepth.
	MaxDecisionDepth int `json:"max_decision_depth,omitempty"`
	// MaxSteps bounds the steps of one task, batch items included; a batch
	// that would exceed it fails. Zero means DefaultMaxSteps.
	MaxSteps int `json:"max_steps,omitempty"`
}

// Default limits.
const (
	DefaultMaxDecisionDepth = 16
	DefaultMaxSteps         = 100_000
)

func (l Limits) resolve() Limits {
	if l.MaxDecisionDepth <= 0 {
		l.MaxDecisionDepth = DefaultMaxDecisionDepth
	}
	if l.MaxSteps <= 0 {
		l.MaxSteps = DefaultMaxSteps
	}
	return l
}

// signalName returns the name of the signal a signal step waits for.
func (s *Step) signalName() string {
	if s.Signal != nil && s.Signal.Name != "" {
		return s.Signal.Name
	}
	return s.Name
}

// rule returns the step's effective trigger rule.
func (s *Step) rule() TriggerRule {
	if s.Type == StepConverge && s.TriggerRule == "" {
		return NoneFailedMinOneSuccess
	}
	return s.TriggerRule
}

// template returns the step template of that name, or nil.
func (w *Workflow) template(name string) *Step {
	for i := range w.Templates {
		if w.Templates[i].Name == name {
			return &w.Templates[i]
		}
	}
	return nil
}

// RetryPolicy says how often and how soon a failed step runs again.
type RetryPolicy struct {
	// MaxAttempts counts the first attempt; 1 means never retry. Zero
	// means the default, 3.
	MaxAttempts int `json:"max_attempts,omitempty"`
	// Backoff is "exponential" (the default), "fixed" or "linear".
	Backoff string `json:"backoff,omitempty"`
	// Initial is the first delay (default 1s), Max the cap (default 1h).
	Initial Duration `json:"initial,omitempty"`
	Max     Duration `json:"max,omitempty"`
	// Jitter is the fraction (0 to 1) by which a delay is randomly shortened
	// or lengthened; default 0.1 for exponential, 0 otherwise.
	Jitter *float64 `json:"jitter,omitempty"`
}

// Identity is a workflow's strategy for deduplicating submissions.
type Identity string

const (
	// IdentityUnique makes every submission a new task unless the caller
	// passes an idempotency key (the default).
	IdentityUnique Identity = "unique"
	// IdentityStrict derives the key from the workflow and the canonical
	// form of the input: the same input never runs twice.
	IdentityStrict Identity = "strict"
	// IdentityCaller requires the caller to pass an idempotency key.
	IdentityCaller Identity = "caller"
)

// Duration is a time.Duration that reads and writes Go duration strings
// ("10ms", "1m") in JSON and YAML.
type Duration time.Duration

// MarshalJSON writes the duration as a string such as "1m30s".
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a Go duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string such as \"10s\": %w", err)
	}
	v, err := parseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

func parseDuration(s string) (time.Duration, error) {
	v, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q (use Go syntax such as 10ms, 30s, 1m)", s)
	}
	if v < 0 {
		return 0, fmt.Errorf("duration %q must not be negative", s)
	}
	return v, nil
}

// NewWorkflow starts a workflow definition. Add steps with Step.
func NewWorkflow(namespace, name, version string) *Workflow {
	return &Workflow{Namespace: namespace, Name: name, Version: version}
}

// StepOption configures a step added with Workflow.Step.
type StepOption func(*Step)

// DependsOn makes the step run after the named steps.
func DependsOn(names ...string) StepOption {
	return func(s *Step) { s.DependsOn = append(s.DependsOn, names...) }
}

// WithConfig sets the step's static configuration, marshalled to JSON.
func WithConfig(v any) StepOption {
	return func(s *Step) {
		b, err := json.Marshal(v)
		if err != nil {
			b, _ = json.Marshal(map[string]string{"error": err.Error()})
		}
		s.Config = b
	}
}

// WithRetry sets the step's retry policy.
func WithRetry(p RetryPolicy) StepOption { return func(s *Step) { s.Retry = p } }

// WithTimeout bounds each attempt of the step.
func WithTimeout(d time.Duration) StepOption { return func(s *Step) { s.Timeout = Duration(d) } }

// WithPriority sets the step's priority (higher runs first).
func WithPriority(p int) StepOption { return func(s *Step) { s.Priority = p } }

// WithTTL expires the step if it stays ready longer than d without starting.
func WithTTL(d time.Duration) StepOption { return func(s *Step) { s.TTL = Duration(d) } }

// AsDecision makes the step a decision: its handler returns
// {"branches": [...]} naming which of its direct children run.
func AsDecision() StepOption { return func(s *Step) { s.Type = StepDecision } }

// AsConverge makes the step run once the branches that ran before it have
// finished (trigger rule none_failed_min_one_success).
func AsConverge() StepOption { return func(s *Step) { s.Type = StepConverge } }

// AsBatch makes the step a batch: its handler returns {"batches": [...]},
// and one item step per entry runs the named template.
func AsBatch(worker string) StepOption {
	return func(s *Step) { s.Type, s.Worker = StepBatch, worker }
}

// AwaitSignal makes the step wait durably for the named signal ("" means
// the step's name), failing after timeout (zero: never). Such a step runs
// no handler: add it with an empty handler name.
func AwaitSignal(name string, timeout time.Duration) StepOption {
	return func(s *Step) { s.Type, s.Signal = StepSignal, &SignalWait{Name: name, Timeout: Duration(timeout)} }
}

// WithTriggerRule sets the rule by which the step's dependencies let it run.
func WithTriggerRule(r TriggerRule) StepOption { return func(s *Step) { s.TriggerRule = r } }

// When skips the step unless the condition holds; see docs/workflows.md.
func When(condition string) StepOption { return func(s *Step) { s.When = condition } }

// Template adds a step template that batch steps create their items from
// and returns the workflow, so calls chain. Only the handler, config,
// retry, timeout, priority and ttl of a template are used.
func (w *Workflow) Template(name, handler string, opts ...StepOption) *Workflow {
	s := Step{Name: name, Handler: handler}
	for _, o := range opts {
		o(&s)
	}
	w.Templates = append(w.Templates, s)
	return w
}

// WithLimits sets the workflow's limits and returns it, so calls chain.
func (w *Workflow) WithLimits(l Limits) *Workflow {
	w.Limits = l
	return w
}

// Step appends a step run by the named handler and returns the workflow, so
// calls chain.
func (w *Workflow) Step(name, handler string, opts ...StepOption) *Workflow {
	s := Step{Name: name, Handler: handler}
	for _, o := range opts {
		o(&s)
	}
	w.Steps = append(w.Steps, s)
	return w
}

// Ref returns "namespace/name@version".
func (w *Workflow) Ref() string { return w.Namespace + "/" + w.Name + "@" + w.Version }

var identPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.\-]*$`)

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
		} else if !identPattern.MatchString(f.v) {
			add("", 0, f.name, "%q may hold only letters, digits, '_', '.' and '-'", f.v)
		}
	}
	switch w.Identity {
	case "", IdentityUnique, IdentityStrict, IdentityCaller:
	default:
		add("", 0, "identity", "unknown strategy %q (want unique, strict or caller)", w.Identity)
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
	limits := w.Limits.resolve()
	if len(w.Steps) > limits.MaxSteps {
		add("", 0, "steps", "%d steps are more than limits.max_steps (%d)", len(w.Steps), limits.MaxSteps)
	}
	w.validateTemplates(add)
	nodes := make([]dag.Node, 0, len(w.Steps))
	for _, s := range w.Steps {
		if s.Name == "" {
			add("", s.line, "name", "every step needs a name")
		} else if !identPattern.MatchString(s.Name) {
			add(s.Name, s.line, "name", "may hold only letters, digits, '_', '.' and '-'")
		}
		w.validateDynamic(s, add)
		if s.Handler == "" && s.Type != StepSignal {
			add(s.Name, s.line, "handler", "is required")
		}
		if len(s.Config) > 0 && !json.Valid(s.Config) {
			add(s.Name, s.line, "config", "is not valid JSON")
		}
		if err := s.Retry.validate(); err != nil {
			add(s.Name, s.line, "retry", "%v", err)
		}
		if check := builtinConfigCheck[s.Handler]; check != nil && (len(s.Config) == 0 || json.Valid(s.Config)) {
			if err := check(s.Config); err != nil {
				add(s.Name, s.line, "", "%v", err)
			}
		}
		nodes = append(nodes, dag.Node{Name: s.Name, Deps: s.DependsOn, Line: s.line})
	}
	graphErrs := dag.Validate(nodes)
	for _, e := range graphErrs {
		add(e.Node, e.Line, "depends_on", "%s", e.Msg)
	}
	if len(graphErrs) == 0 {
		w.validateDecisionDepth(nodes, limits.MaxDecisionDepth, add)
	}
	return errors.Join(errs...)
}

func (p RetryPolicy) validate() error {
	if p.MaxAttempts < 0 {
		return fmt.Errorf("max_attempts must be at least 1, got %d", p.MaxAttempts)
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
