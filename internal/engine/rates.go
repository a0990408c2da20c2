package engine

import (
	"fmt"
	"strings"

	"github.com/weftrun/weft/internal/expr"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/workflow"
)

// This file turns a workflow's rate limits into the bucket keys its steps
// carry, and reports what claims defer for want of tokens: the claim
// (internal/sqlstore) takes the tokens and defers the steps that find
// none.

// EventRateDeferred: a claim deferred Count steps for want of rate-limit
// tokens; Namespace, and for a step's own rate Workflow and Step, name the
// rate (a keyed rate's value is left out).
const EventRateDeferred EventKind = "rate_deferred"

// stepRateKey names the bucket of one step's rate, across versions.
func stepRateKey(w *workflow.Workflow, step string) string {
	return "step:" + w.Namespace + "/" + w.Name + "/" + step
}

// rateKeys are the keyed rate limits of one workflow's steps, by step
// index, with their expressions compiled.
type rateKeys map[int]*expr.Key

// compileRateKeys returns the rate limits of w that vary per task: nil
// when w has only fixed rates (already in its step inserts) or none.
func compileRateKeys(w *workflow.Workflow) (rateKeys, error) {
	var out rateKeys
	for i, st := range w.Steps {
		if st.RateLimit == nil || st.RateLimit.Key == "" {
			continue
		}
		k, err := expr.CompileKey(st.RateLimit.Key)
		if err != nil {
			return nil, fmt.Errorf("step %q: rate_limit.key: %w", st.Name, err)
		}
		if out == nil {
			out = rateKeys{}
		}
		out[i] = k
	}
	return out, nil
}

// apply sets the keys of one task's keyed rates from its input. The shared
// step inserts are copied, not changed.
func (r rateKeys) apply(in *store.TaskInsert) error {
	if len(r) == 0 {
		return nil
	}
	steps := make([]store.StepInsert, len(in.Steps))
	copy(steps, in.Steps)
	in.Steps = steps
	for i, k := range r {
		v, err := k.Eval(in.Input)
		if err != nil {
			return fmt.Errorf("step %q: rate_limit.key: %w", steps[i].Name, err)
		}
		steps[i].RateKey += "=" + v
	}
	return nil
}

// rateEvent is the event of one deferral: the bucket key without a keyed
// rate's value, so that labels stay bounded.
func rateEvent(d store.RateDeferral) Event {
	ev := Event{Kind: EventRateDeferred, Count: d.Steps}
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
		e.Publish(rateEvent(d))
		e.log.Debug("rate limit deferred steps", "rate", d.Key, "count", d.Steps, "until", d.Until)
	}
	e.nudgeTimers()
}
