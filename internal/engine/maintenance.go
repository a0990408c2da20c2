package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/workflow"
)

// maintenanceLoop reaps lapsed leases, expires steps and tasks past their
// deadlines and promotes waiting steps whose time came, on the engine that
// holds the maintenance lease. The leader sleeps until the next due time the
// store reports, bounded by the poll interval; the others look for dead
// processes on their host and ask for the lease once per poll interval.
func (e *Engine) maintenanceLoop(ctx context.Context) {
	defer e.loops.Done()
	reapEvery := max(e.cfg.LeaseTTL/4, 10*time.Millisecond)
	lastReap := time.Now()
	timer := time.NewTimer(0)
	defer timer.Stop()
	var retryIn time.Duration // backing off after a failed round
	for {
		sleep := jitter(e.cfg.PollInterval)
		if e.leading(time.Now()) {
			sleep = min(sleep, max(time.Until(e.leadRenew), 0))
			if next, ok, err := e.store.NextWake(ctx); err == nil && ok {
				sleep = min(sleep, max(time.Until(next), 0))
			}
		}
		if retryIn > 0 {
			// The last round failed: back off, deaf to nudges, so that a
			// store that keeps failing (a full disk) is not hammered, and
			// a due time that could not be handled (it stays due) is not
			// spun on.
			sleep = retryIn
		}
		timer.Reset(sleep)
		select {
		case <-ctx.Done():
			return
		case <-e.nudge:
			if retryIn == 0 {
				continue
			}
			<-timer.C // nudges wait for the backoff
		case <-timer.C:
		}
		retryIn = 0
		// A database deleted or replaced under the engine is not written to.
		if e.checkFile() != nil {
			continue
		}
		e.lead(ctx)
		leader := e.leading(time.Now())
		e.hooks.lead(leader)
		if leader {
			e.timed(ctx)
			e.upkeepRound(ctx)
		}
		// Every tick looks for dead processes on this host (a read); the
		// leader's full reap, which also catches stopped and silent
		// engines, runs every reapEvery.
		if e.reap(ctx, leader, leader && time.Since(lastReap) >= reapEvery) && leader {
			lastReap = time.Now()
		}
		retryIn = e.endRound(ctx)
	}
}

// endRound reports a maintenance round's first failure to the loop's
// health and returns how long to back off (0 after a round that
// succeeded).
func (e *Engine) endRound(ctx context.Context) time.Duration {
	err := e.roundErr
	e.roundErr = nil
	if err == nil {
		e.succeeded(LoopMaintenance)
		return 0
	}
	return e.failed(ctx, LoopMaintenance, "maintenance", err)
}

// maintain runs one round of maintenance at start-up: what dead processes on
// this host left is reclaimed at once, and so is leadership they held.
func (e *Engine) maintain(ctx context.Context) {
	e.reap(ctx, false, false)
	e.lead(ctx)
	if e.leading(time.Now()) {
		e.reap(ctx, true, true)
		e.timed(ctx)
	}
	e.endRound(ctx)
}

// leading reports whether this engine holds the maintenance lease at now.
func (e *Engine) leading(now time.Time) bool { return now.Before(e.leadUntil) }

// lead asks for the maintenance lease, or renews it, when due.
func (e *Engine) lead(ctx context.Context) {
	now := time.Now()
	if now.Before(e.leadRenew) {
		return
	}
	was := e.leading(now)
	ok, err := e.store.Lead(ctx, e.ID(), now, e.cfg.LeaderTTL)
	if err != nil {
		// Keep what is left of a lease; ask again at the next tick.
		e.logErr(ctx, "maintenance lease", err)
		return
	}
	switch {
	case ok:
		e.leadUntil, e.leadRenew = now.Add(e.cfg.LeaderTTL), now.Add(e.cfg.LeaderTTL/3)
		if !was {
			e.log.Info("leading maintenance", "engine_id", e.ID())
		}
	default:
		e.leadUntil, e.leadRenew = time.Time{}, time.Time{}
		if was {
			e.log.Warn("lost the maintenance lease to another engine", "engine_id", e.ID())
		}
	}
}

// timed promotes, expires, fails past their deadline and fires (schedules)
// what is due, writing only when something is. A failure is the round's (logErr).
func (e *Engine) timed(ctx context.Context) {
	next, ok, err := e.store.NextWake(ctx)
	if err != nil {
		e.logErr(ctx, "next wake", err)
		return
	}
	if !ok || next.After(time.Now()) {
		return
	}
	now := time.Now()
	if n, err := e.store.Expire(ctx, now, e.ID()); err != nil {
		e.logErr(ctx, "expire", err)
	} else if n > 0 {
		e.log.Info("expired", "count", n)
	}
	if _, err := e.store.Promote(ctx, now, e.ID()); err != nil {
		e.logErr(ctx, "promote", err)
	}
	e.overdue(ctx, now)
	e.fireSchedules(ctx, e.clock())
}

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
// failure is what the step's own handler would have reported.
func (e *Engine) overdue(ctx context.Context, now time.Time) {
	const batch = 100
	steps, err := e.store.OverdueSteps(ctx, now, batch)
	if err != nil {
		e.logErr(ctx, "overdue steps", err)
		return
	}
	if len(steps) == 0 {
		return
	}
	outcomes := make([]store.Outcome, 0, len(steps))
	ran := make([]store.ClaimedStep, 0, len(steps))
	for _, c := range steps {
		log := &stepLog{logger: e.log, c: &c, took: -1, remote: c.EngineID}
		o := store.Outcome{Fence: c.Fence, EngineID: e.ID()}
		w, def, err := e.claimedDefinition(ctx, c)
		switch {
		case errors.Is(err, store.ErrNotFound):
			o = e.undefined(o, log, err)
		case err != nil:
			e.logErr(ctx, "overdue steps", err)
			return
		default:
			o = e.settle(o, log, w, def, c.Attempts, nil, timedOut(time.Duration(def.Timeout)))
		}
		outcomes = append(outcomes, o)
		ran = append(ran, c)
	}
	results, err := e.store.CompleteSteps(ctx, outcomes)
	if err != nil {
		e.logErr(ctx, "fail overdue steps", err)
		return
	}
	var taken []store.Fence
	for i, r := range results {
		if r != nil {
			continue // its holder reported meanwhile
		}
		taken = append(taken, ran[i].Fence)
		e.publishEnded(ran[i], outcomes[i], true, 0, ran[i].EngineID != e.ID(), nil)
	}
	e.cancelFences(taken, errLeaseLost)
	if len(steps) == batch {
		e.nudgeTimers() // there may be more
	}
}

// reap returns the steps of lapsed engines to the queue. Engines on this host
// whose process is gone are lapsed at once, by any engine. Engines whose
// heartbeat is overdue or that stopped are the leader's to reap: unless
// full is set, it writes only when it found a dead process or, as leader,
// an overdue heartbeat. It reports whether it ran the store's reap.
func (e *Engine) reap(ctx context.Context, leader, full bool) bool {
	engines, err := e.store.ListEngines(ctx)
	if err != nil {
		e.logErr(ctx, "list engines", err)
		return false
	}
	now := time.Now()
	staleBefore := now.Add(-e.cfg.LeaseTTL)
	if !leader {
		staleBefore = time.Time{} // the leader's to judge
	}
	self := e.ID()
	var dead []string
	for _, en := range engines {
		if en.ID == self {
			continue
		}
		if en.Host == e.host && !processAlive(en.PID) {
			dead = append(dead, en.ID)
		} else if leader && en.HeartbeatAt.Before(staleBefore) {
			full = true
		}
	}
	if len(dead) == 0 && !full {
		return false
	}
	// Reap writes nothing when no engine lapsed, stopped or died.
	n, err := e.store.Reap(ctx, now, staleBefore, dead, self)
	if err != nil {
		e.logErr(ctx, "reap", err)
		return false
	}
	if n > 0 {
		e.log.Warn("reclaimed steps of lapsed engines", "count", n)
		e.Publish(Event{Kind: EventLeaseExpired, Count: n})
	}
	return true
}

// logErr keeps the first failure of a maintenance round: endRound logs it
// (not every failure of every round) and backs the loop off.
func (e *Engine) logErr(ctx context.Context, what string, err error) {
	if ctx.Err() == nil && e.roundErr == nil {
		e.roundErr = fmt.Errorf("%s: %w", what, err)
	}
}
