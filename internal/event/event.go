// Package event holds the lifecycle events an engine publishes (claims,
// attempts' ends, reclaimed leases, retention, preemption) and the bus that
// delivers them to subscribers.
package event

import (
	"sync"
	"sync/atomic"
	"time"
)

// Kind names a lifecycle event (see weft.EventKind).
type Kind string

// Lifecycle events (see weft's constants of the same names).
const (
	Submitted    Kind = "submitted"
	Claimed      Kind = "claimed"
	StepEnded    Kind = "step_ended"
	LeaseExpired Kind = "lease_expired"
	Ready        Kind = "ready"
	Preempted    Kind = "preempted"
	// Pruned: retention deleted Count finished tasks of Namespace
	// (Workflow, when the workflow's own retention applied).
	Pruned Kind = "pruned"
	// Attention: the number of tasks needing attention changed to Count.
	Attention Kind = "attention"
	// RateDeferred: a claim deferred Count steps for want of rate-limit
	// tokens; Namespace, and for a step's own rate Workflow and Step, name
	// the rate (a keyed rate's value is left out).
	RateDeferred Kind = "rate_deferred"
)

// Outcomes of StepEnded.
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
	Kind      Kind
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

// Bus is the engine's list of subscribers, replaced whole on change so
// that publishing costs one atomic load when nobody listens. Its zero value
// has no subscriber.
type Bus struct {
	mu   sync.Mutex
	list atomic.Pointer[[]*func(Event)]
}

// Subscribe calls fn with every lifecycle event the engine publishes, on the
// goroutine that publishes it: fn must be quick and must not block (hand
// the event to a channel or a counter). It returns a function that ends the
// subscription.
func (o *Bus) Subscribe(fn func(Event)) (unsubscribe func()) {
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
func (o *Bus) Publish(ev Event) {
	cur := o.list.Load()
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

// Listened reports whether anyone subscribed since the bus was made: an
// event that costs something to build is built only then.
func (o *Bus) Listened() bool { return o.list.Load() != nil }
