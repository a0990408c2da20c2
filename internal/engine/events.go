package engine

import (
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// EventKind names a lifecycle event (see weft.EventKind).
type EventKind string

// Lifecycle events (see weft's constants of the same names).
const (
	EventSubmitted    EventKind = "submitted"
	EventClaimed      EventKind = "claimed"
	EventStepEnded    EventKind = "step_ended"
	EventLeaseExpired EventKind = "lease_expired"
	EventReady        EventKind = "ready"
	EventPreempted    EventKind = "preempted"
)

// Outcomes of EventStepEnded.
const (
	OutcomeCompleted   = "completed"
	OutcomeFailed      = "failed"
	OutcomeRetry       = "retry"
	OutcomeSnoozed     = "snoozed"
	OutcomeSkipped     = "skipped"
	OutcomeInterrupted = "interrupted"
	OutcomePreempted   = "preempted"
)

// Event is one lifecycle event (see weft.Event).
type Event struct {
	Kind      EventKind
	Namespace string
	Workflow  string
	TaskID    int64
	Step      string
	Handler   string
	Attempt   int
	Outcome   string
	Duration  time.Duration
	Count     int
	Remote    bool
	At        time.Time
	// QueueWait is how long a claimed step waited, ready, for its claim.
	QueueWait time.Duration
	// TraceID is the trace of an attempt whose span is sampled ("": none).
	TraceID string
}

// observers is the engine's list of subscribers, replaced whole on change so
// that publishing costs one atomic load when nobody listens.
type observers struct {
	mu   sync.Mutex
	list atomic.Pointer[[]*func(Event)]
}

// Subscribe calls fn with every lifecycle event the engine publishes, on the
// goroutine that publishes it: fn must be quick and must not block (hand
// the event to a channel or a counter). It returns a function that ends the
// subscription.
func (e *Engine) Subscribe(fn func(Event)) (unsubscribe func()) {
	o := &e.observers
	p := &fn
	o.mu.Lock()
	var next []*func(Event)
	if cur := o.list.Load(); cur != nil {
		next = append(next, *cur...)
	}
	next = append(next, p)
	o.list.Store(&next)
	o.mu.Unlock()
	return func() {
		o.mu.Lock()
		defer o.mu.Unlock()
		cur := o.list.Load()
		if cur == nil {
			return
		}
		var rest []*func(Event)
		for _, q := range *cur {
			if q != p {
				rest = append(rest, q)
			}
		}
		o.list.Store(&rest)
	}
}

// Publish delivers an event to the subscribers.
func (e *Engine) Publish(ev Event) {
	cur := e.observers.list.Load()
	if cur == nil || len(*cur) == 0 {
		return
	}
	if ev.At.IsZero() {
		ev.At = time.Now()
	}
	for _, fn := range *cur {
		(*fn)(ev)
	}
}

// outcomeName returns the Outcome of EventStepEnded for an outcome recorded
// in the store.
func outcomeName(o store.Outcome) string {
	switch {
	case o.State == state.StepCompleted:
		return OutcomeCompleted
	case o.State == state.StepSkipped:
		return OutcomeSkipped
	case o.State == state.StepReady:
		return OutcomePreempted
	case o.State == state.StepWaiting && o.Snooze:
		return OutcomeSnoozed
	case o.State == state.StepWaiting:
		return OutcomeRetry
	default:
		return OutcomeFailed
	}
}

// publishClaimed publishes the claim of a step.
func (e *Engine) publishClaimed(c store.ClaimedStep, remote bool) {
	var wait time.Duration
	if c.StartedAt != nil && !c.ReadyAt.IsZero() {
		wait = max(0, c.StartedAt.Sub(c.ReadyAt))
	}
	e.Publish(Event{Kind: EventClaimed, Namespace: c.Namespace, Workflow: c.Workflow, TaskID: c.TaskID, Step: c.Name,
		Handler: c.Handler, Attempt: c.Attempts, Remote: remote, QueueWait: wait})
}

// publishEnded publishes the end of a claimed step's attempt.
func (e *Engine) publishEnded(c store.ClaimedStep, o store.Outcome, recorded bool, d time.Duration, remote bool, span trace.Span) {
	if e.observers.list.Load() == nil {
		return
	}
	outcome := OutcomeInterrupted
	if recorded {
		outcome = outcomeName(o)
	}
	var traceID string
	if span != nil && span.SpanContext().IsSampled() {
		traceID = span.SpanContext().TraceID().String()
	}
	e.Publish(Event{Kind: EventStepEnded, Namespace: c.Namespace, Workflow: c.Workflow, TaskID: c.TaskID, Step: c.Name,
		Handler: c.Handler, Attempt: c.Attempts, Outcome: outcome, Duration: d, Remote: remote, TraceID: traceID})
}
