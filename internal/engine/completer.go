package engine

import (
	"fmt"
	"time"

	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// report is one outcome on its way to the completer. reply, when set,
// receives the outcome's fate (nil, or an error wrapping ErrStaleLease)
// once it is written: a remote worker waits for it before it is told.
type report struct {
	outcome store.Outcome
	reply   chan error
}

// completer writes outcomes in batches: it waits for one, takes whatever
// else is queued, and writes them in one transaction, so an idle engine
// records at once and a busy one batches.
func (e *Engine) completer() {
	defer close(e.done)
	const maxBatch = 512
	batch := make([]report, 0, maxBatch)
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	for o := range e.outbox {
		batch = append(batch[:0], o)
		// When many handlers are in flight, more outcomes are about to
		// arrive: wait up to a millisecond for a fuller batch. An engine
		// with little in flight writes at once.
		want := 0
		if n := min(e.inflightCount()/2, maxBatch); n > 8 {
			want = n
			linger.Reset(time.Millisecond)
		}
	more:
		for len(batch) < maxBatch {
			if len(batch) >= want {
				select {
				case o, ok := <-e.outbox:
					if !ok {
						break more
					}
					batch = append(batch, o)
				default:
					break more
				}
				continue
			}
			select {
			case o, ok := <-e.outbox:
				if !ok {
					break more
				}
				batch = append(batch, o)
			case <-linger.C:
				want = 0
			}
		}
		if !linger.Stop() {
			select {
			case <-linger.C:
			default:
			}
		}
		e.writeOutcomes(batch)
		for _, r := range batch {
			if r.outcome.State == state.StepWaiting {
				e.nudgeTimers()
				break
			}
		}
		e.mu.Lock()
		close(e.settled)
		e.settled = make(chan struct{})
		e.mu.Unlock()
	}
}

// writeOutcomes retries a failed batch write until it succeeds: an accepted
// outcome is never dropped because the database was busy for a moment. Each
// report's reply learns its outcome's fate.
func (e *Engine) writeOutcomes(batch []report) {
	outcomes := make([]store.Outcome, len(batch))
	for i, r := range batch {
		outcomes[i] = r.outcome
	}
	backoff := 10 * time.Millisecond
	for {
		results, err := e.store.CompleteSteps(e.flushCtx, outcomes)
		if err == nil {
			e.succeeded(LoopCompleter)
			for i, r := range results {
				if r != nil {
					e.log.Warn("outcome refused", "step_id", outcomes[i].Fence.StepID, "attempt", outcomes[i].Fence.Attempt, "error", r)
				}
				if batch[i].reply != nil {
					batch[i].reply <- r
				}
			}
			return
		}
		if e.flushCtx.Err() != nil {
			// Stop's deadline passed with the database unreachable: the
			// steps stay running under their leases and are reclaimed and
			// run again once their holders are marked stopped or lapse.
			e.log.Error("shutdown deadline passed before outcomes could be recorded; their steps will be reclaimed",
				"count", len(batch), "error", err)
			for _, r := range batch {
				if r.reply != nil {
					r.reply <- err
				}
			}
			return
		}
		// Logged once per doubling of the failures, not per attempt.
		e.failed(e.flushCtx, LoopCompleter, fmt.Sprintf("record %d outcomes (retrying)", len(batch)), err)
		select {
		case <-time.After(backoff):
		case <-e.flushCtx.Done():
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}
