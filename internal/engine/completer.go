package engine

import (
	"errors"
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
		// arrive: wait up to a millisecond for theirs too, on top of those
		// already queued, so that the steps of one claim that finish
		// together are written together. An engine with little in flight
		// writes at once.
		want := 0
		if n := e.inflightCount(); n > 16 {
			want = min(1+len(e.outbox)+n, maxBatch)
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
		// A recorded outcome may free a concurrency limit without making
		// anything ready: while the last claim left steps under a full
		// limit, the claim loop looks, and so do the engines elsewhere.
		// Otherwise an outcome brings new work only by making steps ready
		// (a breaker that closes counts: its held steps may run), and the
		// store's wake brings the claim loop for those.
		if e.heldBack.Load() {
			select {
			case e.recorded <- struct{}{}:
			default:
			}
		}
		if a, ok := e.store.(store.Announcer); ok && e.heldBack.Load() {
			if err := a.Announce(e.flushCtx); err != nil {
				e.log.Warn("announce freed room", "error", err)
			}
		}
	}
}

// writeOutcomes writes a batch of outcomes and tells each report's reply
// its outcome's fate. A passing failure of the database (a lost connection,
// a deadlock, a timeout) is retried with backoff until the write succeeds:
// an accepted outcome is never dropped because the database was busy for a
// moment. A batch the database refuses (store.ErrRefused: one row's data it
// cannot store) is split until the refused outcome is alone; the others
// land, and the refused one fails its step instead (see unstorable). So no
// outcome is retried forever for a reason that cannot pass, and the
// outcomes behind it are not held up.
func (e *Engine) writeOutcomes(batch []report) {
	outcomes := make([]store.Outcome, len(batch))
	for i, r := range batch {
		outcomes[i] = r.outcome // storable as built (outcome.go)
	}
	results, err := e.completeSteps(outcomes)
	switch {
	case err == nil:
		for i, r := range results {
			if r != nil {
				e.log.Warn("outcome refused", "step_id", outcomes[i].Fence.StepID, "attempt", outcomes[i].Fence.Attempt, "error", r)
			}
			if batch[i].reply != nil {
				batch[i].reply <- r
			}
		}
	case !transient(err) && len(batch) > 1:
		mid := len(batch) / 2
		e.writeOutcomes(batch[:mid])
		e.writeOutcomes(batch[mid:])
	case !transient(err):
		e.unstorable(batch[0], outcomes[0], err)
	default:
		// Stop's deadline passed with the database unreachable: the steps
		// stay running under their leases and are reclaimed and run again
		// once their holders are marked stopped or lapse.
		e.log.Error("shutdown deadline passed before outcomes could be recorded; their steps will be reclaimed",
			"count", len(batch), "error", err)
		for _, r := range batch {
			if r.reply != nil {
				r.reply <- err
			}
		}
	}
}

// unstorable fails the step of an outcome the database refused, with the
// reason as its error, so that the step ends instead of being written again
// and again. Its reply learns that the outcome was not stored. If even the
// failure is refused, the step is left running: it is reclaimed like a step
// whose engine died.
func (e *Engine) unstorable(r report, o store.Outcome, refusal error) {
	msg := "outcome could not be stored: " + refusal.Error()
	if len(msg) > maxStoredError {
		msg = msg[:maxStoredError] + "…"
	}
	failed := storable(store.Outcome{Fence: o.Fence, EngineID: o.EngineID, State: state.StepFailed, Error: msg})
	e.log.Error("the database refused an outcome; its step fails", "step_id", o.Fence.StepID, "attempt", o.Fence.Attempt,
		"state", o.State, "error", refusal)
	results, err := e.completeSteps([]store.Outcome{failed})
	switch {
	case err != nil:
		e.log.Error("the database refused the failure of a step whose outcome it refused; the step will be reclaimed",
			"step_id", o.Fence.StepID, "attempt", o.Fence.Attempt, "error", err)
	case results[0] != nil:
		e.log.Warn("outcome refused", "step_id", o.Fence.StepID, "attempt", o.Fence.Attempt, "error", results[0])
	}
	if r.reply != nil {
		r.reply <- fmt.Errorf("%w outcome: %s", store.ErrInvalid, msg)
	}
}

// maxStoredError bounds the error stored for an outcome the database
// refused (its message may quote the data).
const maxStoredError = 2048

// completeSteps writes outcomes, retrying passing failures with backoff
// until the write succeeds, fails for a reason that cannot pass, or Stop's
// deadline ends the retries.
func (e *Engine) completeSteps(outcomes []store.Outcome) ([]error, error) {
	backoff := 10 * time.Millisecond
	for {
		results, err := e.store.CompleteSteps(e.flushCtx, outcomes)
		if err == nil {
			e.succeeded(LoopCompleter)
		}
		if err == nil || !transient(err) || e.flushCtx.Err() != nil {
			return results, err
		}
		// Logged once per doubling of the failures, not per attempt.
		e.failed(e.flushCtx, LoopCompleter, fmt.Sprintf("record %d outcomes (retrying)", len(outcomes)), err)
		select {
		case <-time.After(backoff):
		case <-e.flushCtx.Done():
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// transient reports whether a failed write may succeed when tried again.
// The stores mark what the database refused for the data or the statement
// (store.ErrRefused), and weft's own checks mark invalid input
// (store.ErrInvalid); anything else (a lost or refused connection, a
// deadlock, a serialization failure, too many connections, a statement
// timeout, a context that ended while the database did not answer) is
// taken to pass.
func transient(err error) bool {
	return !errors.Is(err, store.ErrRefused) && !errors.Is(err, store.ErrInvalid)
}
