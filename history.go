package weft

import (
	"context"

	"github.com/weftrun/weft/store"
)

// HistoryQuery selects events of the history; see Engine.History.
type HistoryQuery = store.HistoryQuery

// HistoryEvent is one transition of a task or one of its steps, with its
// position in the history (Cursor) and its type ("task.submitted",
// "step.claimed", "step.failed", …; see store.EventType).
type HistoryEvent = store.HistoryEvent

// History returns the events after q.After, oldest first: every state
// transition of every task and step, filtered by namespace, workflow or
// task, in one total order (see store.History for how it relates to commit
// order). It is the audit trail of all
// tasks as one ordered log, durable for as long as the tasks are kept, so
// that a reader which stores the Cursor of the last event it handled and
// asks again from there misses nothing, across restarts and engines.
//
// On PostgreSQL an event is read once every write transaction in the
// cluster that began before it has ended: a write transaction left open
// (outside weft, too) holds the history back until it ends.
func (e *Engine) History(ctx context.Context, q HistoryQuery) ([]HistoryEvent, error) {
	return e.core.Admin().History(ctx, q)
}

// HistoryEnd returns a cursor after the events committed so far, for a
// reader that wants what happens from now on. A few of the most recent
// events may still follow it.
func (e *Engine) HistoryEnd(ctx context.Context) (string, error) {
	return e.core.Admin().HistoryEnd(ctx)
}
