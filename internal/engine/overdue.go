package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/workflow"
)

// This file holds step deadlines: the grace a running step's holder gets
// past its timeout, and the failure of the steps whose holder said nothing
// by then.

// deadlineGrace is how long past its timeout a running step is left to its
// holder, which reports the timeout itself (a handler of an engine through
// its context, a remote worker by its own clock), before the maintenance
// leader takes the step back. The store's deadline includes it.
const deadlineGrace = time.Second

// storeTimeout is the timeout a step is stored with: its own plus the grace.
func storeTimeout(d workflow.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return time.Duration(d) + deadlineGrace
}

// overdue fails, under their retry policies, the running steps whose
// deadline passed without word from their holder: a remote worker that
// ignored its timeout or lost the step, or an engine that stalled. The
// failure is what the step's own handler would have reported. The
// maintenance leader calls it when something is due; it returns the
// failure of the round.
func (e *Engine) overdue(ctx context.Context, now time.Time) error {
	const batch = 100
	steps, err := e.store.OverdueSteps(ctx, now, batch)
	if err != nil {
		return fmt.Errorf("overdue steps: %w", err)
	}
	if len(steps) == 0 {
		return nil
	}
	outcomes := make([]store.Outcome, 0, len(steps))
	ran := make([]store.ClaimedStep, 0, len(steps))
	for _, c := range steps {
		log := &stepLog{logger: e.log, c: &c, took: -1, remote: c.EngineID}
		o := store.Outcome{Fence: c.Fence, EngineID: e.ID()}
		w, def, err := e.defs.claimedDefinition(ctx, c)
		switch {
		case errors.Is(err, store.ErrNotFound):
			o = e.defs.undefined(o, log, err)
		case err != nil:
			return fmt.Errorf("overdue steps: %w", err)
		default:
			o = e.defs.settle(o, log, w, def, c.Attempts, nil, timedOut(time.Duration(def.Timeout)))
		}
		outcomes = append(outcomes, o)
		ran = append(ran, c)
	}
	results, err := e.store.CompleteSteps(ctx, outcomes)
	if err != nil {
		return fmt.Errorf("fail overdue steps: %w", err)
	}
	var taken []store.Fence
	for i, r := range results {
		if r != nil {
			continue // its holder reported meanwhile
		}
		taken = append(taken, ran[i].Fence)
		e.publishEnded(ran[i], outcomes[i], true, 0, ran[i].EngineID != e.ID(), nil)
	}
	e.exec.cancelFences(taken, errLeaseLost)
	if len(steps) == batch {
		e.maint.Nudge() // there may be more
	}
	return nil
}
