package weft

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// EventKind names a lifecycle event.
type EventKind string

// Lifecycle events an engine publishes to its subscribers.
const (
	// EventSubmitted: a task was created (a duplicate submission publishes
	// nothing).
	EventSubmitted EventKind = "submitted"
	// EventClaimed: a step was claimed to run.
	EventClaimed EventKind = "claimed"
	// EventStepEnded: an attempt of a step ended; Outcome says how and
	// Duration how long it ran.
	EventStepEnded EventKind = "step_ended"
	// EventLeaseExpired: Count steps of lapsed engines were returned to the
	// queue or failed.
	EventLeaseExpired EventKind = "lease_expired"
	// EventReady: the store reported that steps became ready (Count is 0:
	// how many is not known).
	EventReady EventKind = "ready"
)

// Outcomes of EventStepEnded.
const (
	OutcomeCompleted   = "completed"   // the step completed
	OutcomeFailed      = "failed"      // the step failed for good
	OutcomeRetry       = "retry"       // the attempt failed, another is scheduled
	OutcomeSnoozed     = "snoozed"     // the step waits without failing
	OutcomeInterrupted = "interrupted" // cancelled, taken over or shut down: nothing recorded
)

// Event is one lifecycle event. Fields that do not apply to its kind are
// zero.
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
	// Remote is set for steps run by remote workers rather than this
	// engine's handlers.
	Remote bool
	At     time.Time
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

// Publish delivers an event to the subscribers. The engine publishes its
// own; components that run steps outside it (the remote-worker server)
// publish theirs so that subscribers see all the work in one place.
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

// OutcomeName returns the Outcome of EventStepEnded for an outcome recorded
// in the store.
func OutcomeName(o store.Outcome) string {
	switch {
	case o.State == state.StepCompleted:
		return OutcomeCompleted
	case o.State == state.StepWaiting && o.Snooze:
		return OutcomeSnoozed
	case o.State == state.StepWaiting:
		return OutcomeRetry
	default:
		return OutcomeFailed
	}
}

// publishEnded publishes the end of a claimed step's attempt.
func (e *Engine) publishEnded(c store.ClaimedStep, o store.Outcome, recorded bool, d time.Duration) {
	outcome := OutcomeInterrupted
	if recorded {
		outcome = OutcomeName(o)
	}
	e.Publish(Event{Kind: EventStepEnded, Namespace: c.Namespace, Workflow: c.Workflow, TaskID: c.TaskID, Step: c.Name,
		Handler: c.Handler, Attempt: c.Attempts, Outcome: outcome, Duration: d})
}
