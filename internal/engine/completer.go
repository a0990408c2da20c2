package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weftrun/weft/internal/broadcast"
	"github.com/weftrun/weft/internal/health"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// report is one outcome on its way to the completer. reply, when set,
// receives the outcome's fate (nil, or an error wrapping ErrStaleLease)
// once it is written: a remote worker waits for it before it is told.
type report struct {
	outcome store.Outcome
	reply   chan error
	// launched, if set, counts the handlers launched with the outcome's
	// (launch): the gatherer waits a moment for those still running.
	launched *launchGroup
}

// launchGroup counts the handlers of one launch still running; done is
// closed, and took set, when none is.
type launchGroup struct {
	running atomic.Int32
	start   time.Time
	done    chan struct{}
	took    atomic.Int64 // nanoseconds from the launch to its last handler's return
}

func newLaunchGroup(n int, start time.Time) *launchGroup {
	g := &launchGroup{start: start, done: make(chan struct{})}
	g.running.Store(int32(n))
	return g
}

// returned records that one of the group's handlers returned.
func (g *launchGroup) returned() {
	if g.running.Add(-1) == 0 {
		g.took.Store(int64(time.Since(g.start)))
		close(g.done)
	}
}

// completer writes the outcomes of attempts, its engine's and the remote
// workers', in batches: an idle engine records at once and a busy one
// batches. It runs from Start (start) until Stop closes it (close).
type completer struct {
	e      *Engine
	outbox chan report
	// outcomes is the buffer of a batch's outcomes (outcomesOf).
	outcomes []store.Outcome
	done     chan struct{} // closed when run returns
	// mu guards running: while it is set, run takes outcomes on outbox;
	// close clears it before closing outbox.
	mu      sync.RWMutex
	running bool
	// ctx bounds the retries; Stop cancels it (giveUp) when its deadline
	// passes.
	ctx      context.Context
	giveUp   context.CancelFunc
	settled  broadcast.Signal // fires after each batch
	recorded chan struct{}    // signalled (coalesced) after each batch, for the claim loop
	busy     atomic.Bool      // the last batch was busy (gatherer)
}

func (c *completer) init(e *Engine) {
	c.e, c.outbox, c.done, c.recorded = e, make(chan report, 4*e.cfg.Concurrency), make(chan struct{}), make(chan struct{}, 1)
	c.ctx, c.giveUp = context.WithCancel(context.Background())
}

// start runs the completer.
func (c *completer) start() {
	c.mu.Lock()
	c.running = true
	c.mu.Unlock()
	go c.run()
}

// close ends the completer once it wrote what it was handed: no outcome
// is taken from then on.
func (c *completer) close() {
	c.mu.Lock()
	c.running = false
	close(c.outbox)
	c.mu.Unlock()
}

// send hands an outcome to the completer, unless Stop gave up recording
// (ctx): then the completer may be stuck on a database that is gone,
// with its outbox full, and the step stays running under this engine, to
// be reclaimed like any step of a stopped engine. A handler that returns
// after the completer closed (Stop abandoned it: it ignored its
// cancellation) records nothing either.
func (c *completer) send(r report) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.running && c.sendLocked(r)
}

// sendLocked is send for a caller that holds mu (read) and saw running.
func (c *completer) sendLocked(r report) bool {
	select {
	case c.outbox <- r:
		return true
	case <-c.ctx.Done():
		return false
	}
}

// run writes outcomes in batches (gatherer decides how many), so an idle
// engine records at once and a busy one batches.
func (c *completer) run() {
	defer close(c.done)
	g := newGatherer(c.outbox, c.e.exec.inflightCount, busyPeriod, siblingWait)
	defer g.stop()
	batch := make([]report, 0, maxBatch)
	for o := range c.outbox {
		batch = g.gather(append(batch[:0], o))
		busy := g.busy || len(batch) >= busyBatch
		c.busy.Store(busy)
		g.wrote(len(batch), time.Now())
		if busy || !c.recordAndClaim(batch) {
			c.writeOutcomes(batch)
		}
		for _, r := range batch {
			if r.outcome.State == state.StepWaiting {
				c.e.maint.Nudge()
				break
			}
		}
		c.settled.Fire()
		// A recorded outcome may free a concurrency limit without making
		// anything ready: while the last claim left steps under a full
		// limit, the claim loop looks, and so do the engines elsewhere.
		// Otherwise an outcome brings new work only by making steps ready
		// (a breaker that closes counts: its held steps may run), and the
		// store's wake brings the claim loop for those.
		if c.e.exec.heldBack.Load() {
			select {
			case c.recorded <- struct{}{}:
			default:
			}
		}
		if a, ok := c.e.store.(store.Announcer); ok && c.e.exec.heldBack.Load() {
			if err := a.Announce(c.ctx); err != nil {
				c.e.log.Warn("announce freed room", "error", err)
			}
		}
	}
}

const (
	// maxBatch bounds the outcomes written in one transaction.
	maxBatch = 512
	// busyBatch is the number of outcomes, written together or in
	// flight, from which an engine counts as busy.
	busyBatch = 16
	// busyPeriod is how often a busy completer writes: at most once per
	// period, with everything that arrived meanwhile. A batch costs the
	// database a few statements whatever its size, so fewer, fuller
	// batches leave it more time for the rest (PostgreSQL: 0.15 to 0.11
	// statements a task and 8% more tasks a second in the one-step
	// burn-down; SQLite: 14% more five-step workflows a second, as
	// measured in the commit that set it: git log -S busyPeriod). An
	// outcome of a busy engine waits at most that long more before it is
	// written.
	busyPeriod = 8 * time.Millisecond
	// siblingWait is how long an engine with little in flight waits, after
	// an outcome, for those of the handlers launched with it that still
	// run: steps claimed together and finishing together are written in
	// one transaction, not one each (a DAG's fan-out: SQLite dag7 p50 3.22
	// to 3.00 ms, as measured in the commit that set it). A sibling that
	// runs longer delays the outcome by this much at most.
	siblingWait = 300 * time.Microsecond
)

// gatherer decides which outcomes go in the next batch: those queued when
// the first arrives and, while the engine is busy, those that arrive until
// the period since the last write has passed, or while many handlers are
// in flight, those about to arrive (up to a millisecond more), so that the
// steps of one claim that finish together are written together. An engine
// with little in flight writes at once, but for the first outcome's
// siblings still running (launchGroup), which it waits for up to
// siblingWait.
type gatherer struct {
	outbox      <-chan report
	inflight    func() int
	period      time.Duration
	siblingWait time.Duration
	timer       *time.Timer
	// last is when the last batch went to be written; busy: it was full
	// enough (busyBatch) that more are on their way.
	last time.Time
	busy bool
}

func newGatherer(outbox <-chan report, inflight func() int, period, siblingWait time.Duration) *gatherer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &gatherer{outbox: outbox, inflight: inflight, period: period, siblingWait: siblingWait, timer: t}
}

func (g *gatherer) stop() { g.timer.Stop() }

// wrote records that a batch of n outcomes went to be written at now.
func (g *gatherer) wrote(n int, now time.Time) {
	g.last, g.busy = now, n >= busyBatch
}

// gather adds to batch, which holds the first outcome, the others that go
// with it, and returns it.
func (g *gatherer) gather(batch []report) []report {
	// want: the outcomes to wait for before the timer fires; none once it
	// has, or if there is nothing to wait for.
	want := 0
	switch {
	case g.busy:
		if wait := g.period - time.Since(g.last); wait > 0 {
			want = maxBatch
			g.timer.Reset(wait)
		}
	default:
		// Many in flight: up to a millisecond for them; few: a moment for
		// the first outcome's siblings.
		n, wait := g.inflight(), time.Millisecond
		if n <= busyBatch {
			n, wait = 0, g.siblingWait
			if l := batch[0].launched; l != nil {
				n = int(l.running.Load())
			}
		}
		if n > 0 {
			want = min(1+len(g.outbox)+n, maxBatch)
			g.timer.Reset(wait)
		}
	}
	defer g.timer.Stop()
	for len(batch) < maxBatch {
		if len(batch) >= want {
			select {
			case o, ok := <-g.outbox:
				if !ok {
					return batch
				}
				batch = append(batch, o)
			default:
				return batch
			}
			continue
		}
		select {
		case o, ok := <-g.outbox:
			if !ok {
				return batch
			}
			batch = append(batch, o)
		case <-g.timer.C:
			want = 0
		}
	}
	return batch
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
func (c *completer) writeOutcomes(batch []report) {
	outcomes := c.outcomesOf(batch)
	results, err := c.completeSteps(outcomes)
	switch {
	case err == nil:
		c.tellFates(batch, results)
	case !transient(err) && len(batch) > 1:
		mid := len(batch) / 2
		c.writeOutcomes(batch[:mid])
		c.writeOutcomes(batch[mid:])
	case !transient(err):
		c.unstorable(batch[0], outcomes[0], err)
	default:
		// Stop's deadline passed with the database unreachable: the steps
		// stay running under their leases and are reclaimed and run again
		// once their holders are marked stopped or lapse.
		c.e.log.Error("shutdown deadline passed before outcomes could be recorded; their steps will be reclaimed",
			"count", len(batch), "error", err)
		for _, r := range batch {
			if r.reply != nil {
				r.reply <- err
			}
		}
	}
}

// outcomesOf returns the outcomes of a batch's reports, storable as built
// (outcome.go), in the completer's buffer: they are good until its next
// call, and the store keeps none of them once it has written them.
func (c *completer) outcomesOf(batch []report) []store.Outcome {
	out := c.outcomes[:0]
	for _, r := range batch {
		out = append(out, r.outcome)
	}
	c.outcomes = out
	return out
}

// tellFates tells each report of a written batch its outcome's fate.
func (c *completer) tellFates(batch []report, results []error) {
	for i, r := range results {
		if r != nil {
			o := batch[i].outcome
			c.e.log.Warn("outcome refused", "step_id", o.Fence.StepID, "attempt", o.Fence.Attempt, "error", r)
		}
		if batch[i].reply != nil {
			batch[i].reply <- r
		}
	}
}

// recordAndClaim writes a batch of outcomes of an engine with little in
// flight and, in the same transaction, claims for its free slots the steps
// they made ready (store.OutcomeClaimer, claimInWrite): a DAG's next steps
// start without a claim transaction of their own. It reports false when it
// did not try, or the write failed (then its claim, if it committed after
// all, is released): the batch is then written as usual.
func (c *completer) recordAndClaim(batch []report) bool {
	oc, ok := c.e.store.(store.OutcomeClaimer)
	if !ok {
		return false
	}
	outcomes := c.outcomesOf(batch)
	var results []error
	launch, tried, err := c.e.exec.claimInWrite(func(p store.ClaimParams) (claimed []store.ClaimedStep, err error) {
		results, claimed, err = oc.CompleteAndClaim(c.ctx, outcomes, p)
		return claimed, err
	})
	if !tried || err != nil {
		return false
	}
	launch()
	c.e.monitor.Succeeded(health.LoopCompleter)
	c.tellFates(batch, results)
	return true
}

// releaseLease returns the steps of a claim whose reply was lost to the
// queue (retried): they must not stay running under the engine's live
// lease. Should the store refuse, they stay until the engine stops or
// lapses, and are reclaimed then.
func (c *completer) releaseLease(engine string, lease int64) {
	var n int
	what := func() string { return "release a failed claim" }
	err := c.retried(what, func() (err error) {
		n, err = c.e.store.ReleaseLease(c.ctx, engine, lease)
		return err
	})
	switch {
	case err != nil:
		c.e.log.Error("could not release the steps of a claim whose reply was lost; they are reclaimed when the engine stops or lapses",
			"lease_id", lease, "error", err)
	case n > 0:
		c.e.log.Warn("released steps of a claim whose reply was lost", "count", n, "lease_id", lease)
	}
}

// unstorable fails the step of an outcome the database refused, with the
// reason as its error, so that the step ends instead of being written again
// and again. Its reply learns that the outcome was not stored. If even the
// failure is refused, the step is left running: it is reclaimed like a step
// whose engine died.
func (c *completer) unstorable(r report, o store.Outcome, refusal error) {
	msg := "outcome could not be stored: " + refusal.Error()
	if len(msg) > maxStoredError {
		msg = msg[:maxStoredError] + "…"
	}
	failed := storable(store.Outcome{Fence: o.Fence, EngineID: o.EngineID, State: state.StepFailed, Error: msg})
	c.e.log.Error("the database refused an outcome; its step fails", "step_id", o.Fence.StepID, "attempt", o.Fence.Attempt,
		"state", o.State, "error", refusal)
	results, err := c.completeSteps([]store.Outcome{failed})
	switch {
	case err != nil:
		c.e.log.Error("the database refused the failure of a step whose outcome it refused; the step will be reclaimed",
			"step_id", o.Fence.StepID, "attempt", o.Fence.Attempt, "error", err)
	case results[0] != nil:
		c.e.log.Warn("outcome refused", "step_id", o.Fence.StepID, "attempt", o.Fence.Attempt, "error", results[0])
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
func (c *completer) completeSteps(outcomes []store.Outcome) (results []error, err error) {
	what := func() string { return fmt.Sprintf("record %d outcomes", len(outcomes)) }
	err = c.retried(what, func() (err error) {
		results, err = c.e.store.CompleteSteps(c.ctx, outcomes)
		return err
	})
	return results, err
}

// retried runs write, one of the completer's writes (what says which, for
// the log: built only on a failure), until it succeeds, fails for a reason
// that cannot pass (transient), or Stop's deadline ends the retries, with
// backoff between tries.
func (c *completer) retried(what func() string, write func() error) error {
	backoff := 10 * time.Millisecond
	for {
		err := write()
		if err == nil {
			c.e.monitor.Succeeded(health.LoopCompleter)
		}
		if err == nil || !transient(err) || c.ctx.Err() != nil {
			return err
		}
		// Logged once per doubling of the failures, not per attempt.
		c.e.monitor.Failed(c.ctx, health.LoopCompleter, what()+" (retrying)", err)
		select {
		case <-time.After(backoff):
		case <-c.ctx.Done():
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

// errStopping: the engine stopped recording outcomes before it could take
// one (its database did not answer by Stop's deadline).
var errStopping = fmt.Errorf("%w: the engine is stopping and no longer records outcomes", store.ErrUnavailable)

// record writes one outcome and waits for its fate: through the completer,
// in its batches, while the engine runs; directly otherwise.
func (c *completer) record(ctx context.Context, o store.Outcome) error {
	c.mu.RLock()
	if c.running {
		reply := make(chan error, 1)
		sent := c.sendLocked(report{outcome: o, reply: reply})
		c.mu.RUnlock()
		if !sent {
			return errStopping
		}
		select {
		case err := <-reply:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	c.mu.RUnlock()
	results, err := c.e.store.CompleteSteps(ctx, []store.Outcome{o})
	if err != nil {
		return err
	}
	return results[0]
}
