package workflow

import (
	"encoding/json"
	"time"

	"github.com/weftrun/weft/internal/dag"
	"github.com/weftrun/weft/internal/duration"
	"github.com/weftrun/weft/store"
)

// Workflow is a versioned definition namespace/name@version: a directed
// acyclic graph of steps. Build one with New or load one from a YAML
// template with Load or Parse.
type Workflow struct {
	Namespace   string `json:"namespace"`
	Name        string `json:"name"`
	Version     string `json:"version"`
	Description string `json:"description,omitempty"`
	// Identity decides how submissions are deduplicated; see Identity.
	Identity Identity `json:"identity,omitempty"`
	// OnConflict decides what a submission whose idempotency key exists
	// does, unless the submission says; see OnConflict.
	OnConflict OnConflict `json:"on_conflict,omitempty"`
	Steps      []Step     `json:"steps"`
	// Templates are step definitions that batch steps create items from
	// (Step.Worker names one); they are not steps of the graph themselves.
	Templates []Step `json:"templates,omitempty"`
	// Limits bound what a task of the workflow may grow to.
	Limits Limits `json:"limits,omitempty"`
	// Schedules submit tasks of the workflow on cron ticks; see Schedule.
	Schedules []Schedule `json:"schedules,omitempty"`
	// Concurrency bounds how many tasks of the workflow run at once (a
	// task runs from the claim of its first step to its end), across
	// every engine and remote worker; nil means no bound.
	Concurrency *Concurrency `json:"concurrency,omitempty"`
	// Retention, if set, deletes the workflow's finished tasks once they
	// are older than its duration for their state (see Retention).
	Retention *Retention `json:"retention,omitempty"`

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
	// Workflow is the workflow a sub-workflow step starts a child task of:
	// "namespace/name" (the newest registered version when the child
	// starts) or "namespace/name@version".
	Workflow string `json:"workflow,omitempty"`
	// Input builds a sub-workflow step's child input: an expression (see
	// docs/workflows.md) over input and deps that yields an object. ""
	// passes the task's own input.
	Input string `json:"input,omitempty"`
	// Concurrency bounds how many of this step (of every task of the
	// workflow) run at once, across every engine and remote worker; nil
	// means no bound.
	Concurrency *Concurrency `json:"concurrency,omitempty"`
	// Preemptible lets an engine stop the step, through its handler's
	// context, when every slot of the engine is busy and a step of
	// strictly higher priority is the next it would claim: the step goes
	// back to ready keeping its checkpoint, without using an attempt.
	Preemptible bool `json:"preemptible,omitempty"`
	// RateLimit bounds how often this step (of every task of the
	// workflow) is claimed, across every engine and remote worker; nil
	// means no bound.
	RateLimit *RateLimit `json:"rate_limit,omitempty"`
	// CircuitBreaker holds the claims of this step (of every task of the
	// workflow, across versions) after consecutive failed attempts; nil
	// means none.
	CircuitBreaker *CircuitBreaker `json:"circuit_breaker,omitempty"`

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
	// StepWorkflow: the step runs no handler. It starts a child task of
	// the workflow named in Workflow, with the input Input builds, and
	// waits durably, holding no slot, for it to end; the child's result
	// (its final steps' results by name) is the step's result, and a
	// child that fails fails the attempt under the step's retry policy
	// (the next attempt starts a new child).
	StepWorkflow StepType = "workflow"
	// StepFunction: the step runs a durable function (weft.RegisterFunc),
	// whose handler is the function's. Each call the function makes
	// becomes a step of the task that this step waits for, holding no
	// slot; a function's workflow has this one step.
	StepFunction StepType = "function"
)

// SubWorkflowHandler is the engine's built-in handler that starts the
// child task of a StepWorkflow step; the step names no handler itself.
const SubWorkflowHandler = "weft.workflow"

// EngineStepType returns the type of the steps the engine runs with
// handler, when handler is one of its own (SubWorkflowHandler,
// store.SignalHandler): no step, Go handler or remote worker may name those.
func EngineStepType(handler string) (StepType, bool) {
	switch handler {
	case SubWorkflowHandler:
		return StepWorkflow, true
	case store.SignalHandler:
		return StepSignal, true
	}
	return "", false
}

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
	// MaxDepth bounds how deep child tasks of a task of this workflow may
	// nest below their root task (a child of a root task is at depth 1);
	// a step that would start a deeper child fails. Zero means
	// DefaultMaxDepth; at most MaxDepthLimit.
	MaxDepth int `json:"max_depth,omitempty"`
	// MaxChildren bounds the child tasks one task of this workflow may
	// start, retries included; a step that would start more fails. Zero
	// means DefaultMaxChildren; at most MaxChildrenLimit.
	MaxChildren int `json:"max_children,omitempty"`
}

// The most that limits.max_depth and limits.max_children may be set to:
// together they bound the tree of tasks that one task can grow, so that a
// workflow that starts itself (or two that start each other) stops.
const (
	MaxDepthLimit    = 32
	MaxChildrenLimit = 10_000
)

// Default limits.
const (
	DefaultMaxDecisionDepth = 16
	DefaultMaxSteps         = 100_000
	DefaultMaxDepth         = 5
	DefaultMaxChildren      = 100
)

func (l Limits) Resolve() Limits {
	if l.MaxDecisionDepth <= 0 {
		l.MaxDecisionDepth = DefaultMaxDecisionDepth
	}
	if l.MaxSteps <= 0 {
		l.MaxSteps = DefaultMaxSteps
	}
	if l.MaxDepth <= 0 {
		l.MaxDepth = DefaultMaxDepth
	}
	if l.MaxChildren <= 0 {
		l.MaxChildren = DefaultMaxChildren
	}
	// A definition stored before the upper bounds existed holds to them
	// too.
	l.MaxDepth, l.MaxChildren = min(l.MaxDepth, MaxDepthLimit), min(l.MaxChildren, MaxChildrenLimit)
	return l
}

// SignalName returns the name of the signal a signal step waits for.
func (s *Step) SignalName() string {
	if s.Signal != nil && s.Signal.Name != "" {
		return s.Signal.Name
	}
	return s.Name
}

// Rule returns the step's effective trigger rule.
func (s *Step) Rule() TriggerRule {
	if s.Type == StepConverge && s.TriggerRule == "" {
		return NoneFailedMinOneSuccess
	}
	return s.TriggerRule
}

// StepTemplate returns the step template of that name, or nil.
func (w *Workflow) StepTemplate(name string) *Step {
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

// OnConflict is what a submission does when its idempotency key exists in
// its namespace.
type OnConflict string

const (
	// OnConflictReturn returns the task that holds the key and submits
	// nothing (the default).
	OnConflictReturn OnConflict = "return"
	// OnConflictSupersede submits a new task, which takes the key: the
	// task that held it is cancelled if it has not finished, its audit
	// naming the new task. It needs a key (given, or derived by the
	// strict identity).
	OnConflictSupersede OnConflict = "supersede"
)

// WithOnConflict sets what the workflow's submissions do when their
// idempotency key exists, unless a submission says, and returns the
// workflow, so calls chain.
func (w *Workflow) WithOnConflict(c OnConflict) *Workflow {
	w.OnConflict = c
	return w
}

// Duration is a time.Duration that reads and writes its text in JSON and
// YAML: Go's syntax ("10ms", "1m30s") or whole days ("7d"); it writes the
// shortest form ("2m", "7d"). The REST API's wire.Duration is this type.
type Duration = duration.Duration

// New starts a workflow definition. Add steps with Step.
func New(namespace, name, version string) *Workflow {
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

// Preemptible marks a step that an engine may preempt for a ready step of
// higher priority (see Step.Preemptible).
func Preemptible() StepOption { return func(s *Step) { s.Preemptible = true } }

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

// AsSubWorkflow makes the step start a child task of the workflow ref
// ("namespace/name" or "namespace/name@version") and wait for it; input is
// an expression over input and deps that yields the child's input object
// ("" passes the task's input). Such a step runs no handler: add it with an
// empty handler name.
func AsSubWorkflow(ref, input string) StepOption {
	return func(s *Step) { s.Type, s.Workflow, s.Input = StepWorkflow, ref, input }
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

// WithIdentity sets how the workflow's submissions are deduplicated and
// returns it, so calls chain.
func (w *Workflow) WithIdentity(id Identity) *Workflow {
	w.Identity = id
	return w
}

// WithLimits sets the workflow's limits and returns it, so calls chain.
func (w *Workflow) WithLimits(l Limits) *Workflow {
	w.Limits = l
	return w
}

// WithConcurrency bounds how many of the step run at once across every
// engine (see Concurrency): at most limit, or with key (a CEL expression
// over the task input) at most limit per value of key.
func WithConcurrency(limit int, key string) StepOption {
	return func(s *Step) { s.Concurrency = &Concurrency{Limit: limit, Key: key} }
}

// WithCircuitBreaker gives the step a circuit breaker (see CircuitBreaker):
// after failures consecutive failed attempts its claims are held for
// cooldown, then one probe decides whether it closes.
func WithCircuitBreaker(failures int, cooldown time.Duration) StepOption {
	return func(s *Step) { s.CircuitBreaker = &CircuitBreaker{Failures: failures, Cooldown: Duration(cooldown)} }
}

// WithConcurrency bounds how many tasks of the workflow run at once across
// every engine (see Concurrency) and returns the workflow, so calls chain.
func (w *Workflow) WithConcurrency(limit int, key string) *Workflow {
	w.Concurrency = &Concurrency{Limit: limit, Key: key}
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

// CircuitBreaker is the circuit breaker of a step, shared by every task of
// the workflow and every version of it (its key is
// "namespace/workflow/step"). Each failed attempt of the step (a failure
// for good or a retry; not a lease that lapsed with its engine) counts; a
// success resets the count. After Failures consecutive failed attempts the breaker opens:
// steps under it stay ready, using no attempt, and are not claimed until
// Cooldown has passed. Then exactly one is claimed as a probe: its success
// closes the breaker, its failure opens it again for a fresh Cooldown.
type CircuitBreaker struct {
	// Failures is how many consecutive failed attempts open the breaker,
	// at least 1.
	Failures int `json:"failures"`
	// Cooldown is how long an open breaker holds its steps before a probe,
	// more than 0 and at most 7 days.
	Cooldown Duration `json:"cooldown"`

	line int // line in the source template, for errors
}

// BreakerKey names the circuit breaker of one step of a workflow, across
// versions: "namespace/workflow/step".
func BreakerKey(namespace, workflow, step string) string {
	return namespace + "/" + workflow + "/" + step
}

// Concurrency is a global limit of running work: at most Limit at once, or
// with Key at most Limit per value of Key.
type Concurrency struct {
	// Limit is how many may run at once, at least 1.
	Limit int `json:"limit"`
	// Key, if set, is a CEL expression over the task input (the variable
	// input) whose value (a string, number or boolean) divides the limit:
	// at most Limit run at once for each value, say one per customer with
	// input.customer. A task whose input the key cannot be computed from
	// is refused at submission.
	Key string `json:"key,omitempty"`

	line    int // lines in the source template, for errors
	keyLine int
}
