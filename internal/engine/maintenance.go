package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/weftrun/weft/internal/event"
	"github.com/weftrun/weft/internal/health"
	"github.com/weftrun/weft/internal/jitter"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/workflow"
)

// maintenanceLoop reaps lapsed leases, expires steps and tasks past their
// deadlines and promotes waiting steps whose time came, on the engine that
// holds the maintenance lease. Its rounds read or write the store only for
// what is due: the leader's next due time as the store last reported it (or
// a nudge that something new waits in this process), its lease renewal, the
// listing of engines and the full reap (maintenanceState). The others ask
// for the lease once per poll interval. Every round, at least once per poll
// interval, checks the database file and whether the processes of the
// engines last listed on this host are alive, which costs no statement.
func (e *Engine) maintenanceLoop(ctx context.Context) {
	defer e.loops.Done()
	timer := time.NewTimer(0)
	defer timer.Stop()
	var retryIn time.Duration // backing off after a failed round
	var due <-chan struct{}   // due times written elsewhere
	if d, ok := e.store.(store.DueWaker); ok {
		due = d.DueWake()
	}
	for {
		sleep := e.maintenanceSleep(time.Now())
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
			e.nudged(timer, retryIn)
		case <-due:
			e.nudged(timer, retryIn)
		case <-timer.C:
		}
		retryIn = 0
		// A database deleted or replaced under the engine is not written to.
		if e.monitor.CheckFile() != nil {
			continue
		}
		e.lead(ctx)
		now := time.Now()
		leader := e.leading(now)
		e.hooks.Lead(leader)
		if leader {
			e.timed(ctx)
			e.upkeepRound(ctx)
		}
		e.reap(ctx, leader)
		retryIn = e.endRound(ctx)
	}
}

// nudged makes the maintenance loop, told that something new may wait,
// read the next due time again; while it backs off after a failed round
// (retryIn), it waits for the backoff first.
func (e *Engine) nudged(timer *time.Timer, retryIn time.Duration) {
	if retryIn > 0 {
		<-timer.C
	}
	e.maint.timersAt = time.Time{}
}

// maintenanceState is what the maintenance work (Start, then the
// maintenance loop) remembers between rounds, so that a round reads the
// store only for what is due.
type maintenanceState struct {
	// timersAt is when the leader reads the next due time again: the due
	// time it read last, bounded by a fallback poll (timerPoll); zero to
	// read it at the next round.
	timersAt time.Time
	// listAt is when the engines are listed next, reapAt when the leader's
	// next full reap is due and staleAt when the first engine listed would
	// lapse (the leader lists again then, to see whether it did).
	listAt, reapAt, staleAt time.Time
	// others are the other live engines as last listed; sameHost, those
	// on this host, whose processes each round checks.
	others, sameHost []store.EngineInfo
}

// reapEvery is how often the engines are listed and the leader runs its
// full reap, which also catches stopped engines.
func (e *Engine) reapEvery() time.Duration { return max(e.cfg.LeaseTTL/4, 10*time.Millisecond) }

// timerPoll is how long the leader goes without reading the next due time
// when nothing nudged it. What this process makes wait nudges it; other
// engines do not, so while any is live it reads once per poll interval.
// Alone on a store that hears other processes (PostgreSQL's LISTEN), it
// reads once per reapEvery: what a process that runs no engine writes to
// fall due (a start time, a ttl, a schedule) is announced like steps made
// ready, and the notification nudges it. A store that hears nothing
// (SQLite) is read once per poll interval.
func (e *Engine) timerPoll() time.Duration {
	if l, ok := e.store.(store.Listener); len(e.maint.others) > 0 || !ok || !l.Listening() {
		return jitter.Of(e.cfg.PollInterval)
	}
	return e.reapEvery()
}

// maintenanceSleep returns how long the maintenance loop may sleep at now:
// a poll interval at most, for the checks that cost no statement (the
// database file, the processes of this host's engines), and on the leader
// until the first thing due.
func (e *Engine) maintenanceSleep(now time.Time) time.Duration {
	d := jitter.Of(e.cfg.PollInterval)
	if !e.leading(now) {
		return d // and ask for the lease again
	}
	m := &e.maint
	// A zero time is due at once, except staleAt: no engine to watch.
	next := e.leadRenew
	for _, t := range []time.Time{m.timersAt, m.listAt, m.reapAt, e.upkeep.last.Add(e.cfg.UpkeepInterval)} {
		if t.Before(next) {
			next = t
		}
	}
	if !m.staleAt.IsZero() && m.staleAt.Before(next) {
		next = m.staleAt
	}
	return min(d, max(next.Sub(now), 0))
}

// endRound reports a maintenance round's first failure to the loop's
// health and returns how long to back off (0 after a round that
// succeeded).
func (e *Engine) endRound(ctx context.Context) time.Duration {
	err := e.roundErr
	e.roundErr = nil
	if err == nil {
		e.monitor.Succeeded(health.LoopMaintenance)
		return 0
	}
	return e.monitor.Failed(ctx, health.LoopMaintenance, "maintenance", err)
}

// maintain runs one round of maintenance at start-up: what dead processes on
// this host left is reclaimed at once, and so is leadership they held.
func (e *Engine) maintain(ctx context.Context) {
	e.reap(ctx, false)
	e.lead(ctx)
	if e.leading(time.Now()) {
		e.maint.reapAt = time.Time{} // a full reap at once
		e.reap(ctx, true)
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
			// A new leader reads what is due and reaps at once.
			e.maint.timersAt, e.maint.reapAt = time.Time{}, time.Time{}
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
// It reads the next due time only when the last one it read came, the
// fallback poll passed (timerPoll), a nudge cleared it or steps were made
// ready since (stir: they may carry a ttl): while work flows, once per round,
// at most about a poll interval apart.
func (e *Engine) timed(ctx context.Context) {
	now := time.Now()
	if now.Before(e.maint.timersAt) && !e.stirred.Load() {
		return
	}
	next, ok, err := e.nextWake(ctx, now)
	if err != nil || !ok || next.After(now) {
		return
	}
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
	// What was due is handled: the next due time is another one.
	if next, ok, err := e.nextWake(ctx, now); err == nil && ok && !next.After(now) {
		// Still due (what could not be handled yet): look again a poll
		// interval later rather than spin on it.
		e.maint.timersAt = now.Add(jitter.Of(e.cfg.PollInterval))
	}
}

// nextWake reads the next due time and sets when to read it again.
func (e *Engine) nextWake(ctx context.Context, now time.Time) (time.Time, bool, error) {
	e.stirred.Store(false) // what is made ready from now on stirs again
	next, ok, err := e.store.NextWake(ctx)
	if err != nil {
		e.logErr(ctx, "next wake", err)
		e.maint.timersAt = time.Time{}
		return next, ok, err
	}
	e.maint.timersAt = now.Add(e.timerPoll())
	if ok && next.Before(e.maint.timersAt) {
		e.maint.timersAt = next
	}
	return next, ok, nil
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
// whose process is gone are lapsed at once, by any engine: each round checks
// the processes of those last listed, and the engines are listed every
// reapEvery. Engines whose heartbeat is overdue or that stopped are the
// leader's to reap: it lists the engines again when the first one listed
// would lapse, and runs the store's full reap every reapEvery and when it
// became leader, which reads and writes nothing more when nothing lapsed.
func (e *Engine) reap(ctx context.Context, leader bool) {
	m := &e.maint
	now := time.Now()
	if !now.Before(m.listAt) || (leader && !m.staleAt.IsZero() && !now.Before(m.staleAt)) {
		if !e.listEngines(ctx, now) {
			return
		}
	}
	staleBefore := now.Add(-e.cfg.LeaseTTL)
	if !leader {
		staleBefore = time.Time{} // the leader's to judge
	}
	var dead []string
	for _, en := range m.sameHost {
		if !processAlive(en.PID) {
			dead = append(dead, en.ID)
		}
	}
	full := false
	if leader {
		full = !now.Before(m.reapAt)
		for _, en := range m.others {
			full = full || en.HeartbeatAt.Before(staleBefore)
		}
	}
	if len(dead) == 0 && !full {
		return
	}
	if leader {
		m.reapAt = now.Add(e.reapEvery())
	}
	// Reap writes nothing when no engine lapsed, stopped or died.
	n, err := e.store.Reap(ctx, now, staleBefore, dead, e.ID())
	if err != nil {
		e.logErr(ctx, "reap", err)
		return
	}
	if len(dead) > 0 || n > 0 {
		m.listAt = time.Time{} // list the engines left at the next round
	}
	if n > 0 {
		e.log.Warn("reclaimed steps of lapsed engines", "count", n)
		e.events.Publish(event.Event{Kind: event.LeaseExpired, Count: n})
	}
}

// listEngines lists the live engines into the maintenance state and reports
// whether it could.
func (e *Engine) listEngines(ctx context.Context, now time.Time) bool {
	m := &e.maint
	engines, err := e.store.ListEngines(ctx)
	if err != nil {
		e.logErr(ctx, "list engines", err)
		return false
	}
	self := e.ID()
	m.others, m.sameHost, m.staleAt = m.others[:0], m.sameHost[:0], time.Time{}
	for _, en := range engines {
		if en.ID == self {
			continue
		}
		m.others = append(m.others, en)
		if en.Host == e.host {
			m.sameHost = append(m.sameHost, en)
		}
		if lapse := en.HeartbeatAt.Add(e.cfg.LeaseTTL); m.staleAt.IsZero() || lapse.Before(m.staleAt) {
			m.staleAt = lapse
		}
	}
	if soon := now.Add(e.cfg.PollInterval); !m.staleAt.IsZero() && m.staleAt.Before(soon) {
		// List again once it would have lapsed, and not again at once if
		// it did: the reap of this round takes it.
		m.staleAt = soon
	}
	m.listAt = now.Add(e.reapEvery())
	return true
}

// logErr keeps the first failure of a maintenance round: endRound logs it
// (not every failure of every round) and backs the loop off.
func (e *Engine) logErr(ctx context.Context, what string, err error) {
	if ctx.Err() == nil && e.roundErr == nil {
		e.roundErr = fmt.Errorf("%s: %w", what, err)
	}
}
