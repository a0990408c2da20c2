// Package maintenance runs the work of the engine that holds the
// maintenance lease: reaping the leases of lapsed engines, promoting and
// expiring what is due (timers, deadlines, schedules) and the upkeep
// (retention, the attention count). Every engine runs a Leader; one at a
// time leads.
package maintenance

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/weftrun/weft/internal/event"
	"github.com/weftrun/weft/internal/health"
	"github.com/weftrun/weft/internal/jitter"
	"github.com/weftrun/weft/store"
)

// Store is what the leader reads and writes.
type Store interface {
	Lead(ctx context.Context, engineID string, now time.Time, ttl time.Duration) (bool, error)
	ListEngines(ctx context.Context) ([]store.EngineInfo, error)
	Reap(ctx context.Context, now, staleBefore time.Time, dead []string, engineID string) (int, error)
	Expire(ctx context.Context, now time.Time, engineID string) (int, error)
	Promote(ctx context.Context, now time.Time, engineID string) (int, error)
	NextWake(ctx context.Context) (time.Time, bool, error)
	PruneRates(ctx context.Context, now time.Time) (int, error)
	CountTasks(ctx context.Context, f store.TaskFilter) (int, error)
	ListWorkflows(ctx context.Context) ([]store.WorkflowRecord, error)
	Retentions(ctx context.Context) ([]store.Retention, error)
	FinishedTasks(ctx context.Context, q store.FinishedQuery) ([]int64, error)
	DeleteTasks(ctx context.Context, p store.DeleteParams) (store.BatchResult, error)
}

// Config is what a Leader needs of its engine.
type Config struct {
	// ID is the engine's id (it changes when the engine registers again);
	// Host, the host it runs on.
	ID   func() string
	Host string
	// The engine's settings (engine.Config documents them).
	LeaseTTL, PollInterval, LeaderTTL, UpkeepInterval, StaleAfter time.Duration
	Logger                                                        *slog.Logger
	Health                                                        *health.Monitor
	Events                                                        *event.Bus
	// Followers are told, each round, whether this engine leads: the
	// work that follows the history on the leader alone (webhooks, task
	// spans).
	Followers []interface{ Lead(leader bool) }
	// Overdue fails the running steps whose deadline passed at now, and
	// FireSchedules submits the tasks of the schedules due: the engine's
	// work, which the leader does when something is due. Each returns its
	// first failure, which is the round's.
	Overdue       func(ctx context.Context, now time.Time) error
	FireSchedules func(ctx context.Context) error
}

// Leader is an engine's maintenance work: it asks for the maintenance
// lease and, while it holds it, does what is due. Its state is owned by
// FirstRound, then Run.
type Leader struct {
	store Store
	cfg   Config
	log   *slog.Logger
	nudge chan struct{} // wakes Run to look at due times again
	// stirred: steps were made ready since the leader last read the next
	// due time (Stir).
	stirred atomic.Bool
	// leadUntil and leadRenew are when this engine's maintenance lease
	// ends and when it next asks for the lease.
	leadUntil, leadRenew time.Time
	// state is what the leader remembers between rounds.
	state memory
	// roundErr is the first failure of the current round.
	roundErr error
	// upkeep is the state of retention and the attention count.
	upkeep upkeepState
}

// New returns the leader of an engine on s.
func New(s Store, cfg Config) *Leader {
	return &Leader{store: s, cfg: cfg, log: cfg.Logger, nudge: make(chan struct{}, 1)}
}

// Stir tells the leader that the store made steps ready (here, or on a
// store that hears them, anywhere) or that this engine claimed some: they
// may carry a ttl or a deadline, so its next round reads the next due time
// again.
func (l *Leader) Stir() { l.stirred.Store(true) }

// Nudge makes the leader recompute its next due time.
func (l *Leader) Nudge() {
	select {
	case l.nudge <- struct{}{}:
	default:
	}
}

// Run reaps lapsed leases, expires steps and tasks past their
// deadlines and promotes waiting steps whose time came, on the engine that
// holds the maintenance lease. Its rounds read or write the store only for
// what is due: the leader's next due time as the store last reported it (or
// a nudge that something new waits in this process), its lease renewal, the
// listing of engines and the full reap (maintenanceState). The others ask
// for the lease once per poll interval. Every round, at least once per poll
// interval, checks the database file and whether the processes of the
// engines last listed on this host are alive, which costs no statement.
func (l *Leader) Run(ctx context.Context) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	var retryIn time.Duration // backing off after a failed round
	var due <-chan struct{}   // due times written elsewhere
	if d, ok := l.store.(store.DueWaker); ok {
		due = d.DueWake()
	}
	for {
		sleep := l.maintenanceSleep(time.Now())
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
		case <-l.nudge:
			l.nudged(timer, retryIn)
		case <-due:
			l.nudged(timer, retryIn)
		case <-timer.C:
		}
		retryIn = 0
		// A database deleted or replaced under the engine is not written to.
		if l.cfg.Health.CheckFile() != nil {
			continue
		}
		l.lead(ctx)
		now := time.Now()
		leader := l.leading(now)
		for _, f := range l.cfg.Followers {
			f.Lead(leader)
		}
		if leader {
			l.timed(ctx)
			l.upkeepRound(ctx)
		}
		l.reap(ctx, leader)
		retryIn = l.endRound(ctx)
	}
}

// nudged makes the maintenance loop, told that something new may wait,
// read the next due time again; while it backs off after a failed round
// (retryIn), it waits for the backoff first.
func (l *Leader) nudged(timer *time.Timer, retryIn time.Duration) {
	if retryIn > 0 {
		<-timer.C
	}
	l.state.timersAt = time.Time{}
}

// memory is what the leader remembers between rounds, so that a round
// reads the store only for what is due.
type memory struct {
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
func (l *Leader) reapEvery() time.Duration { return max(l.cfg.LeaseTTL/4, 10*time.Millisecond) }

// timerPoll is how long the leader goes without reading the next due time
// when nothing nudged it. What this process makes wait nudges it; other
// engines do not, so while any is live it reads once per poll interval.
// Alone on a store that hears other processes (PostgreSQL's LISTEN), it
// reads once per reapEvery: what a process that runs no engine writes to
// fall due (a start time, a ttl, a schedule) is announced like steps made
// ready, and the notification nudges it. A store that hears nothing
// (SQLite) is read once per poll interval.
func (l *Leader) timerPoll() time.Duration {
	if ls, ok := l.store.(store.Listener); len(l.state.others) > 0 || !ok || !ls.Listening() {
		return jitter.Of(l.cfg.PollInterval)
	}
	return l.reapEvery()
}

// maintenanceSleep returns how long the maintenance loop may sleep at now:
// a poll interval at most, for the checks that cost no statement (the
// database file, the processes of this host's engines), and on the leader
// until the first thing due.
func (l *Leader) maintenanceSleep(now time.Time) time.Duration {
	d := jitter.Of(l.cfg.PollInterval)
	if !l.leading(now) {
		return d // and ask for the lease again
	}
	m := &l.state
	// A zero time is due at once, except staleAt: no engine to watch.
	next := l.leadRenew
	for _, t := range []time.Time{m.timersAt, m.listAt, m.reapAt, l.upkeep.last.Add(l.cfg.UpkeepInterval)} {
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
func (l *Leader) endRound(ctx context.Context) time.Duration {
	err := l.roundErr
	l.roundErr = nil
	if err == nil {
		l.cfg.Health.Succeeded(health.LoopMaintenance)
		return 0
	}
	return l.cfg.Health.Failed(ctx, health.LoopMaintenance, "maintenance", err)
}

// FirstRound runs one round of maintenance at start-up, before Run: what
// dead processes on this host left is reclaimed at once, and so is
// leadership they held.
func (l *Leader) FirstRound(ctx context.Context) {
	l.reap(ctx, false)
	l.lead(ctx)
	if l.leading(time.Now()) {
		l.state.reapAt = time.Time{} // a full reap at once
		l.reap(ctx, true)
		l.timed(ctx)
	}
	l.endRound(ctx)
}

// leading reports whether this engine holds the maintenance lease at now.
func (l *Leader) leading(now time.Time) bool { return now.Before(l.leadUntil) }

// lead asks for the maintenance lease, or renews it, when due.
func (l *Leader) lead(ctx context.Context) {
	now := time.Now()
	if now.Before(l.leadRenew) {
		return
	}
	was := l.leading(now)
	ok, err := l.store.Lead(ctx, l.cfg.ID(), now, l.cfg.LeaderTTL)
	if err != nil {
		// Keep what is left of a lease; ask again at the next tick.
		l.logErr(ctx, "maintenance lease", err)
		return
	}
	switch {
	case ok:
		l.leadUntil, l.leadRenew = now.Add(l.cfg.LeaderTTL), now.Add(l.cfg.LeaderTTL/3)
		if !was {
			l.log.Info("leading maintenance", "engine_id", l.cfg.ID())
			// A new leader reads what is due and reaps at once.
			l.state.timersAt, l.state.reapAt = time.Time{}, time.Time{}
		}
	default:
		l.leadUntil, l.leadRenew = time.Time{}, time.Time{}
		if was {
			l.log.Warn("lost the maintenance lease to another engine", "engine_id", l.cfg.ID())
		}
	}
}

// timed promotes, expires, fails past their deadline and fires (schedules)
// what is due, writing only when something is. A failure is the round's (logErr).
// It reads the next due time only when the last one it read came, the
// fallback poll passed (timerPoll), a nudge cleared it or steps were made
// ready since (Stir: they may carry a ttl): while work flows, once per round,
// at most about a poll interval apart.
func (l *Leader) timed(ctx context.Context) {
	now := time.Now()
	if now.Before(l.state.timersAt) && !l.stirred.Load() {
		return
	}
	next, ok, err := l.nextWake(ctx, now)
	if err != nil || !ok || next.After(now) {
		return
	}
	if n, err := l.store.Expire(ctx, now, l.cfg.ID()); err != nil {
		l.logErr(ctx, "expire", err)
	} else if n > 0 {
		l.log.Info("expired", "count", n)
	}
	if _, err := l.store.Promote(ctx, now, l.cfg.ID()); err != nil {
		l.logErr(ctx, "promote", err)
	}
	if err := l.cfg.Overdue(ctx, now); err != nil {
		l.fail(ctx, err)
	}
	if err := l.cfg.FireSchedules(ctx); err != nil {
		l.fail(ctx, err)
	}
	// What was due is handled: the next due time is another one.
	if next, ok, err := l.nextWake(ctx, now); err == nil && ok && !next.After(now) {
		// Still due (what could not be handled yet): look again a poll
		// interval later rather than spin on it.
		l.state.timersAt = now.Add(jitter.Of(l.cfg.PollInterval))
	}
}

// nextWake reads the next due time and sets when to read it again.
func (l *Leader) nextWake(ctx context.Context, now time.Time) (time.Time, bool, error) {
	l.stirred.Store(false) // what is made ready from now on stirs again
	next, ok, err := l.store.NextWake(ctx)
	if err != nil {
		l.logErr(ctx, "next wake", err)
		l.state.timersAt = time.Time{}
		return next, ok, err
	}
	l.state.timersAt = now.Add(l.timerPoll())
	if ok && next.Before(l.state.timersAt) {
		l.state.timersAt = next
	}
	return next, ok, nil
}

// reap returns the steps of lapsed engines to the queue. Engines on this host
// whose process is gone are lapsed at once, by any engine: each round checks
// the processes of those last listed, and the engines are listed every
// reapEvery. Engines whose heartbeat is overdue or that stopped are the
// leader's to reap: it lists the engines again when the first one listed
// would lapse, and runs the store's full reap every reapEvery and when it
// became leader, which reads and writes nothing more when nothing lapsed.
func (l *Leader) reap(ctx context.Context, leader bool) {
	m := &l.state
	now := time.Now()
	if !now.Before(m.listAt) || (leader && !m.staleAt.IsZero() && !now.Before(m.staleAt)) {
		if !l.listEngines(ctx, now) {
			return
		}
	}
	staleBefore := now.Add(-l.cfg.LeaseTTL)
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
		m.reapAt = now.Add(l.reapEvery())
	}
	// Reap writes nothing when no engine lapsed, stopped or died.
	n, err := l.store.Reap(ctx, now, staleBefore, dead, l.cfg.ID())
	if err != nil {
		l.logErr(ctx, "reap", err)
		return
	}
	if len(dead) > 0 || n > 0 {
		m.listAt = time.Time{} // list the engines left at the next round
	}
	if n > 0 {
		l.log.Warn("reclaimed steps of lapsed engines", "count", n)
		l.cfg.Events.Publish(event.Event{Kind: event.LeaseExpired, Count: n})
	}
}

// listEngines lists the live engines into the maintenance state and reports
// whether it could.
func (l *Leader) listEngines(ctx context.Context, now time.Time) bool {
	m := &l.state
	engines, err := l.store.ListEngines(ctx)
	if err != nil {
		l.logErr(ctx, "list engines", err)
		return false
	}
	self := l.cfg.ID()
	m.others, m.sameHost, m.staleAt = m.others[:0], m.sameHost[:0], time.Time{}
	for _, en := range engines {
		if en.ID == self {
			continue
		}
		m.others = append(m.others, en)
		if en.Host == l.cfg.Host {
			m.sameHost = append(m.sameHost, en)
		}
		if lapse := en.HeartbeatAt.Add(l.cfg.LeaseTTL); m.staleAt.IsZero() || lapse.Before(m.staleAt) {
			m.staleAt = lapse
		}
	}
	if soon := now.Add(l.cfg.PollInterval); !m.staleAt.IsZero() && m.staleAt.Before(soon) {
		// List again once it would have lapsed, and not again at once if
		// it did: the reap of this round takes it.
		m.staleAt = soon
	}
	m.listAt = now.Add(l.reapEvery())
	return true
}

// logErr keeps the first failure of a maintenance round: endRound logs it
// (not every failure of every round) and backs the loop off.
func (l *Leader) logErr(ctx context.Context, what string, err error) {
	l.fail(ctx, fmt.Errorf("%s: %w", what, err))
}

// fail keeps err as the round's failure if it is the first.
func (l *Leader) fail(ctx context.Context, err error) {
	if ctx.Err() == nil && l.roundErr == nil {
		l.roundErr = err
	}
}
