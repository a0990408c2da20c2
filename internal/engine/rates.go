package engine

import (
	"strings"

	"github.com/weftrun/weft/internal/event"
	"github.com/weftrun/weft/store"
)

// This file reports what claims defer for want of rate-limit tokens: the
// claim (internal/sqlstore) takes the tokens and defers the steps that
// find none; limits.go computes the bucket keys the steps carry.

// rateEvent is the event of one deferral: the bucket key without a keyed
// rate's value, so that labels stay bounded.
func rateEvent(d store.RateDeferral) event.Event {
	ev := event.Event{Kind: event.RateDeferred, Count: d.Steps}
	key, _, _ := strings.Cut(d.Key, "=")
	switch {
	case strings.HasPrefix(key, "ns:"):
		ev.Namespace = strings.TrimPrefix(key, "ns:")
	case strings.HasPrefix(key, "step:"):
		parts := strings.SplitN(strings.TrimPrefix(key, "step:"), "/", 3)
		if len(parts) == 3 {
			ev.Namespace, ev.Workflow, ev.Step = parts[0], parts[1], parts[2]
		}
	}
	return ev
}

// rateDeferred reports what a claim deferred: an event per bucket (for
// metrics), a debug log, and a nudge of the maintenance loop, whose next
// due time may now be sooner.
func (e *Engine) rateDeferred(ds []store.RateDeferral) {
	for _, d := range ds {
		e.events.Publish(rateEvent(d))
		e.log.Debug("rate limit deferred steps", "rate", d.Key, "count", d.Steps, "until", d.Until)
	}
	e.maint.Nudge()
}
