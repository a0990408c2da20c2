package engine

import (
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/weftrun/weft/internal/event"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// outcomeName returns the Outcome of event.StepEnded for an outcome recorded
// in the store.
func outcomeName(o store.Outcome) string {
	switch {
	case o.State == state.StepCompleted:
		return event.OutcomeCompleted
	case o.State == state.StepSkipped:
		return event.OutcomeSkipped
	case o.State == state.StepReady:
		return event.OutcomePreempted
	case o.State == state.StepWaiting && (o.Snooze || o.BeginWait || o.Child != nil):
		// It waits without failing: a snooze, the function's calls, a
		// signal wait's start, a child task's start.
		return event.OutcomeSnoozed
	case o.State == state.StepWaiting:
		return event.OutcomeRetry
	default:
		return event.OutcomeFailed
	}
}

// publishClaimed publishes the claim of a step.
func (e *Engine) publishClaimed(c store.ClaimedStep, remote bool) {
	var wait time.Duration
	if c.StartedAt != nil && !c.ReadyAt.IsZero() {
		wait = max(0, c.StartedAt.Sub(c.ReadyAt))
	}
	e.events.Publish(event.Event{Kind: event.Claimed, Namespace: c.Namespace, Workflow: c.Workflow, TaskID: c.TaskID, Step: c.Name,
		Handler: c.Handler, Attempt: c.Attempts, Remote: remote, QueueWait: wait})
}

// publishEnded publishes the end of a claimed step's attempt.
func (e *Engine) publishEnded(c store.ClaimedStep, o store.Outcome, recorded bool, d time.Duration, remote bool, span trace.Span) {
	if !e.events.Listened() {
		return
	}
	outcome := event.OutcomeInterrupted
	if recorded {
		outcome = outcomeName(o)
	}
	var traceID string
	if span != nil && span.SpanContext().IsSampled() {
		traceID = span.SpanContext().TraceID().String()
	}
	e.events.Publish(event.Event{Kind: event.StepEnded, Namespace: c.Namespace, Workflow: c.Workflow, TaskID: c.TaskID, Step: c.Name,
		Handler: c.Handler, Attempt: c.Attempts, Outcome: outcome, Duration: d, Remote: remote, TraceID: traceID})
}
