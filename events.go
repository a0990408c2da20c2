package weft

import (
	"time"

	"github.com/weftrun/weft/internal/event"
)

// EventKind names a lifecycle event.
type EventKind string

// Lifecycle events an engine publishes to its subscribers.
const (
	// EventSubmitted: a task was created (a duplicate submission publishes
	// nothing).
	EventSubmitted EventKind = EventKind(event.Submitted)
	// EventClaimed: a step was claimed to run.
	EventClaimed EventKind = EventKind(event.Claimed)
	// EventStepEnded: an attempt of a step ended; Outcome says how and
	// Duration how long it ran.
	EventStepEnded EventKind = EventKind(event.StepEnded)
	// EventLeaseExpired: Count steps of lapsed engines were returned to the
	// queue or failed.
	EventLeaseExpired EventKind = EventKind(event.LeaseExpired)
	// EventReady: the store reported that steps became ready (Count is 0:
	// how many is not known).
	EventReady EventKind = EventKind(event.Ready)
	// EventPruned: retention deleted Count finished tasks of Namespace
	// (and Workflow, when the workflow's own retention applied).
	EventPruned EventKind = EventKind(event.Pruned)
	// EventAttention: the maintenance leader counted Count tasks needing
	// attention, a number different from its last count.
	EventAttention EventKind = EventKind(event.Attention)
	// EventPreempted: the engine cancelled a preemptible step's context
	// to make room for a ready step of higher priority (see ErrPreempted),
	// or (Remote set) asked the remote worker that holds it to stop it;
	// its EventStepEnded follows, with OutcomePreempted unless the handler
	// finished anyway.
	EventPreempted EventKind = EventKind(event.Preempted)
	// EventRateDeferred: a claim deferred Count steps for want of
	// rate-limit tokens. Namespace names the rate, with Workflow and Step
	// for a step's own rate (empty for a namespace's); a keyed rate's
	// value is left out.
	EventRateDeferred EventKind = EventKind(event.RateDeferred)
)

// Outcomes of EventStepEnded.
const (
	OutcomeCompleted   = event.OutcomeCompleted   // the step completed
	OutcomeFailed      = event.OutcomeFailed      // the step failed for good
	OutcomeRetry       = event.OutcomeRetry       // the attempt failed, another is scheduled
	OutcomeSnoozed     = event.OutcomeSnoozed     // the step waits without failing
	OutcomeSkipped     = event.OutcomeSkipped     // the step's condition was false
	OutcomeInterrupted = event.OutcomeInterrupted // cancelled, taken over or shut down: nothing recorded
	OutcomePreempted   = event.OutcomePreempted   // preempted: back to ready, its attempt given back
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
	// QueueWait, for EventClaimed, is how long the step waited, ready, for
	// its claim.
	QueueWait time.Duration
	// TraceID, for EventStepEnded, is the trace id (hex) of the attempt's
	// span when it is sampled: metrics use it as an exemplar.
	TraceID string
}

// Subscribe calls fn with every lifecycle event the engine publishes, for
// its own handlers and the remote workers it serves, on the goroutine that
// publishes it: fn must be quick and must not block (hand the event to a
// channel or a counter). It returns a function that ends the subscription.
func (e *Engine) Subscribe(fn func(Event)) (unsubscribe func()) {
	return e.core.Events().Subscribe(func(ev event.Event) {
		fn(Event{Kind: EventKind(ev.Kind), Namespace: ev.Namespace, Workflow: ev.Workflow, TaskID: ev.TaskID, Step: ev.Step,
			Handler: ev.Handler, Attempt: ev.Attempt, Outcome: ev.Outcome, Duration: ev.Duration, Count: ev.Count, Remote: ev.Remote, At: ev.At,
			QueueWait: ev.QueueWait, TraceID: ev.TraceID})
	})
}
