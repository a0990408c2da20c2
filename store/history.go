package store

import (
	"context"
	"strings"
)

// History is the durable, ordered log of every state transition (the audit
// log), which event streams follow. A reader keeps the Cursor of the last
// event it handled and asks for what comes after it: an event committed
// later always comes after every cursor handed out before, so a reader
// that resumes misses nothing still retained, and sees nothing twice.
//
// A step's claim (and its task's start, where the claim started it) is
// recorded with the end of its run, or at its engine's next heartbeat if
// the run lasts: the history has it from then, with the claim's time.
//
// The order is total and the same for every reader. The events of one
// transaction are in the order it made them. Transactions follow one
// another in commit order on SQLite; on PostgreSQL in the order they began
// to write, which two concurrent transactions may commit in reverse (a
// step's claim may then come before its task's submission).
type History interface {
	// History returns up to q.Limit events after q.After, oldest first,
	// that match q's filters. Cursors are opaque; a malformed one is
	// ErrInvalid.
	History(ctx context.Context, q HistoryQuery) ([]HistoryEvent, error)
	// HistoryEnd returns a cursor after every event committed so far (or
	// nearly: a few recent events may still follow it), for readers that
	// want only what happens from now on.
	HistoryEnd(ctx context.Context) (string, error)
}

// HistoryQuery selects history events.
type HistoryQuery struct {
	// After is the cursor of the last event seen; "" reads from the oldest
	// event retained.
	After string
	// Namespace, Workflow ("namespace/name", or a name: see
	// workflow.ParseFilter) and TaskID filter; zero values match every
	// event.
	Namespace string
	Workflow  string
	TaskID    int64
	// Namespaces, if not nil, keeps the events of these namespaces alone
	// (none when empty): where a credential may look.
	Namespaces []string
	// Limit bounds the events returned; 0 means 100, at most 1000.
	Limit int
	// CheckAfter refuses (ErrInvalid) an After that lies beyond the newest
	// event, which no store of this database handed out (a database
	// restored or replaced under a client): one more read when no event
	// follows After. A stream checks it once, where it starts.
	CheckAfter bool
}

// HistoryEvent is one transition of a task or step, where it sits in the
// history, and what kind of event it is.
type HistoryEvent struct {
	// Cursor is the event's position: pass it as HistoryQuery.After to
	// read on after it.
	Cursor string
	// Type names the event (see EventType).
	Type      string
	Namespace string
	Workflow  string
	AuditEntry
}

// EventType names the event a transition is: "task.submitted",
// "task.started", "task.retried", "task.completed", "task.failed",
// "task.cancelled", "task.expired"; "step.ready", "step.claimed",
// "step.completed", "step.failed", "step.waiting" (a retry backoff, a
// snooze, a timer or a signal: the reason says which), "step.skipped",
// "step.cancelled", "step.expired", "step.resolved"; "breaker.opened",
// "breaker.probing" and "breaker.closed" (a step's circuit breaker, see
// BreakerAuditPrefix); and, for any other transition, "task." or "step."
// and the state it moved to. The history names a preemption (running to
// ready with a reason starting ReasonPreempted) "step.preempted" (see
// Preempted).
func EventType(step, from, to string) string {
	if b, ok := strings.CutPrefix(to, BreakerAuditPrefix); ok {
		switch b {
		case BreakerOpen:
			return "breaker.opened"
		case BreakerHalfOpen:
			return "breaker.probing"
		}
		return "breaker.closed"
	}
	if step == "" {
		switch {
		case to == "pending" && from == "":
			return "task.submitted"
		case to == "running" && from == "pending":
			return "task.started"
		case to == "running":
			return "task.retried"
		}
		return "task." + to
	}
	if to == "running" {
		return "step.claimed"
	}
	return "step." + to
}

// ReasonPreempted starts the audit reason of a preempted step's return to
// ready; the rest names the step that preempted it.
const ReasonPreempted = "preempted by "

// Preempted reports whether a transition is a preemption: a running step
// returned to ready by an engine for a step of higher priority.
func Preempted(e AuditEntry) bool {
	return e.Step != "" && e.From == "running" && e.To == "ready" && strings.HasPrefix(e.Reason, ReasonPreempted)
}
