// Package weft is a durable workflow orchestration engine: a DAG of steps
// that survives crashes, persisted in an embedded SQLite file.
//
// Open an engine on a database, register workflows (built with NewWorkflow or
// loaded from YAML with LoadTemplate) and the Go handlers they name, start
// it, and submit tasks:
//
//	e, err := weft.Open(ctx, "weft.db", weft.Config{Concurrency: 8})
//	e.Handle("greet", func(ctx context.Context, a *weft.Attempt) (any, error) { ... })
//	e.Register(ctx, weft.NewWorkflow("demo", "hello", "1").Step("greet", "greet"))
//	e.Start(ctx)
//	res, err := e.Submit(ctx, weft.Submission{Workflow: "demo/hello", Input: map[string]any{"name": "Ada"}})
package weft

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/weftrun/weft/internal/slots"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// Config configures an Engine. The zero value is usable.
type Config struct {
	// Concurrency is the number of handler slots: at most this many
	// handlers run at once. Default 10.
	Concurrency int
	// NamespaceCaps limits how many steps of a namespace run at once
	// across every engine sharing the database.
	NamespaceCaps map[string]int
	// HeartbeatInterval is how often the engine renews its lease on every
	// step it holds, in one write. Default 5s.
	HeartbeatInterval time.Duration
	// LeaseTTL is how long after its last heartbeat an engine is presumed
	// dead and its steps are returned to the queue. An engine on the same
	// host whose process is gone is detected within PollInterval. Default
	// 30s.
	LeaseTTL time.Duration
	// PollInterval bounds how long work submitted by another process waits
	// before this engine looks for it. Default 1s.
	PollInterval time.Duration
	// LeaderTTL is the lease of the maintenance leader: one engine per
	// database reaps lapsed engines, expires overdue work and promotes
	// steps whose time came. The leader renews every LeaderTTL/3; when it
	// dies another engine takes over within LeaderTTL (at once when it
	// stops, or when its process is found gone on the same host). Default
	// 10s or three times PollInterval, whichever is longer; at least three
	// times PollInterval.
	LeaderTTL time.Duration
	// PriorityAging is how long a ready step waits to gain one priority
	// level. Default 1m. Used when Open creates the store.
	PriorityAging time.Duration
	// ShutdownTimeout bounds how long Stop waits for running handlers when
	// its context has no deadline. Default 30s.
	ShutdownTimeout time.Duration
	// Logger receives the engine's logs. Default: slog.Default().
	Logger *slog.Logger
	// HTTPClient is used by the built-in http handler. Default: a client
	// with a 5 minute timeout.
	HTTPClient *http.Client
	// ID names this engine in leases and the audit log. Default: host,
	// process id and a random suffix.
	ID string
}

func (c *Config) setDefaults() error {
	if c.Concurrency == 0 {
		c.Concurrency = 10
	}
	if c.Concurrency < 0 {
		return fmt.Errorf("weft: Concurrency must be positive, got %d", c.Concurrency)
	}
	for ns, n := range c.NamespaceCaps {
		if n <= 0 {
			return fmt.Errorf("weft: cap for namespace %q must be positive, got %d", ns, n)
		}
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.HeartbeatInterval, 5*time.Second)
	def(&c.LeaseTTL, 30*time.Second)
	def(&c.PollInterval, time.Second)
	def(&c.LeaderTTL, max(10*time.Second, 3*c.PollInterval))
	def(&c.PriorityAging, time.Minute)
	def(&c.ShutdownTimeout, 30*time.Second)
	if c.LeaseTTL < 2*c.HeartbeatInterval {
		return fmt.Errorf("weft: LeaseTTL (%s) must be at least twice HeartbeatInterval (%s)", c.LeaseTTL, c.HeartbeatInterval)
	}
	if c.LeaderTTL < 3*c.PollInterval {
		return fmt.Errorf("weft: LeaderTTL (%s) must be at least three times PollInterval (%s)", c.LeaderTTL, c.PollInterval)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{Timeout: 5 * time.Minute}
	}
	if c.ID == "" {
		host, _ := os.Hostname()
		var b [4]byte
		_, _ = crand.Read(b[:])
		c.ID = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
	}
	return nil
}

// Engine runs workflows: it claims ready steps from its store, runs their
// handlers on a bounded pool of slots and records their outcomes. Any number
// of engines may share one database.
type Engine struct {
	cfg    Config
	store  store.Store
	log    *slog.Logger
	host   string
	slots  *slots.Pool
	owns   bool // Close closes the store
	done   chan struct{}
	outbox chan store.Outcome

	mu        sync.Mutex
	handlers  map[string]Handler
	names     []string             // sorted handler names, what the engine claims
	workflows map[string]*Workflow // by Ref
	inflight  map[int64]*running   // by step id
	started   bool
	stopping  bool
	engineID  string
	cancelRun context.CancelFunc // stops the loops
	loops     sync.WaitGroup
	rejoin    sync.Mutex // serialises re-registration after being declared dead
	handlerWG sync.WaitGroup
	settled   chan struct{} // closed and replaced after each completion batch
	nudge     chan struct{} // wakes the maintenance loop to look at due times again
	// leadUntil and leadRenew, owned by the maintenance work (Start, then
	// the maintenance loop), are when this engine's maintenance lease ends
	// and when it next asks for the lease.
	leadUntil, leadRenew time.Time
	// flushCtx bounds the completer's retries; Stop cancels it when its
	// deadline passes.
	flushCtx    context.Context
	cancelFlush context.CancelFunc
	onlyTask    int64 // when set, claim only this task's steps (RunTask)
	conds       conditions
	observers   observers
}

// running is one handler in flight.
type running struct {
	fence  store.Fence
	cancel context.CancelCauseFunc
}

// errCancelled and errLeaseLost are the causes with which the engine cancels
// a handler whose outcome must not be recorded.
var (
	errTaskCancelled = errors.New("task cancelled")
	errLeaseLost     = errors.New("lease lost: the step was taken over or cancelled")
	errShutdown      = errors.New("engine shutting down")
)

// New returns an engine on an open store. The caller keeps ownership of the
// store.
func New(s store.Store, cfg Config) (*Engine, error) {
	if s == nil {
		return nil, errors.New("weft: nil store")
	}
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	e := &Engine{
		cfg:       cfg,
		store:     s,
		log:       cfg.Logger,
		host:      host,
		slots:     slots.New(cfg.Concurrency),
		done:      make(chan struct{}),
		outbox:    make(chan store.Outcome, 4*cfg.Concurrency),
		handlers:  map[string]Handler{},
		workflows: map[string]*Workflow{},
		inflight:  map[int64]*running{},
		engineID:  cfg.ID,
		settled:   make(chan struct{}),
		nudge:     make(chan struct{}, 1),
	}
	e.flushCtx, e.cancelFlush = context.WithCancel(context.Background())
	e.registerBuiltins()
	return e, nil
}

// Store returns the engine's store.
func (e *Engine) Store() store.Store { return e.store }

// ID returns the engine's id as recorded in leases and the audit log.
func (e *Engine) ID() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.engineID
}

// Handle registers the Go handler for a handler name used by workflow steps.
// Registering a name twice replaces the earlier handler.
func (e *Engine) Handle(name string, h Handler) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.handlers[name] = h
	e.names = make([]string, 0, len(e.handlers))
	for n := range e.handlers {
		e.names = append(e.names, n)
	}
	sort.Strings(e.names)
}

// handlerNames returns the names the engine claims steps for. Handlers may
// be registered while the engine runs.
func (e *Engine) handlerNames() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.names
}

// Start registers the engine in the store and starts claiming steps. It
// returns once the engine runs; call Stop to end it.
func (e *Engine) Start(ctx context.Context) error {
	e.mu.Lock()
	if e.started {
		e.mu.Unlock()
		return errors.New("weft: engine already started")
	}
	e.started = true
	id := e.engineID
	e.mu.Unlock()
	if err := e.store.RegisterEngine(ctx, store.EngineInfo{ID: id, Host: e.host, PID: os.Getpid(), StartedAt: time.Now()}); err != nil {
		e.mu.Lock()
		e.started = false
		e.mu.Unlock()
		return fmt.Errorf("weft: start engine: %w", err)
	}
	// Reclaim at once what dead engines on this host left behind.
	e.maintain(ctx)
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	e.cancelRun = cancel
	e.loops.Add(3)
	go e.claimLoop(runCtx)
	go e.heartbeatLoop(runCtx)
	go e.maintenanceLoop(runCtx)
	go e.completer()
	e.log.Info("engine started", "engine_id", id, "concurrency", e.cfg.Concurrency)
	return nil
}

// Stop shuts the engine down gracefully: it stops claiming, waits for
// running handlers until ctx ends (or ShutdownTimeout when ctx has no
// deadline), then cancels the rest, records the outcomes it has (giving up
// two seconds after the deadline if the database is unreachable: those
// steps are reclaimed and run again), and marks the engine stopped so that
// what it left is reclaimed at once.
func (e *Engine) Stop(ctx context.Context) error {
	e.mu.Lock()
	if !e.started || e.stopping {
		e.mu.Unlock()
		return nil
	}
	e.stopping = true
	e.mu.Unlock()
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, e.cfg.ShutdownTimeout)
		defer cancel()
	}
	e.cancelRun()
	e.loops.Wait()
	drained := make(chan struct{})
	go func() { e.handlerWG.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-ctx.Done():
		e.log.Warn("shutdown deadline passed, cancelling running handlers", "engine_id", e.ID())
		e.cancelAll(errShutdown)
		<-drained
	}
	close(e.outbox)
	select {
	case <-e.done:
	case <-ctx.Done():
		// Give the last outcomes a moment, then stop retrying them: the
		// database may be unreachable, and Stop must not hang on it.
		select {
		case <-e.done:
		case <-time.After(2 * time.Second):
			e.cancelFlush()
			<-e.done
		}
	}
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err := e.store.StopEngine(stopCtx, e.ID())
	e.log.Info("engine stopped", "engine_id", e.ID())
	return err
}

// RunTask starts the engine restricted to one task, runs that task to its
// end and stops the engine. It is what "weft run" does: other work in the
// database is left to other engines. If ctx ends first, the engine stops
// gracefully and the task stays in the database to be resumed.
func (e *Engine) RunTask(ctx context.Context, id int64) (*Task, error) {
	e.mu.Lock()
	started := e.started
	e.mu.Unlock()
	if started {
		return nil, errors.New("weft: RunTask needs an engine that is not started")
	}
	e.onlyTask = id
	if err := e.Start(ctx); err != nil {
		return nil, err
	}
	task, err := e.Wait(ctx, id)
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.ShutdownTimeout)
	defer cancel()
	return task, errors.Join(err, e.Stop(stopCtx))
}

// Close stops the engine if it runs and closes the store when the engine
// opened it.
func (e *Engine) Close() error {
	err := e.Stop(context.Background())
	if e.owns {
		err = errors.Join(err, e.store.Close())
	}
	return err
}

// inflightCount returns how many handlers run on this engine.
func (e *Engine) inflightCount() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.inflight)
}

// nudgeTimers makes the maintenance loop recompute its next due time.
func (e *Engine) nudgeTimers() {
	select {
	case e.nudge <- struct{}{}:
	default:
	}
}

// settledSignal returns a channel closed after the next completion batch.
func (e *Engine) settledSignal() <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.settled
}

func (e *Engine) cancelAll(cause error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, r := range e.inflight {
		r.cancel(cause)
	}
}

// cancelFences stops the handlers holding the given fences.
func (e *Engine) cancelFences(fences []store.Fence, cause error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, f := range fences {
		if r, ok := e.inflight[f.StepID]; ok && r.fence == f {
			r.cancel(cause)
		}
	}
}

// claimLoop claims as many ready steps as there are free slots, whenever a
// slot frees up, the store made steps ready, or the poll interval passes.
func (e *Engine) claimLoop(ctx context.Context) {
	defer e.loops.Done()
	timer := time.NewTimer(0)
	defer timer.Stop()
	// Claims that failed but may have committed (their reply was lost):
	// their steps are released before the engine claims again, or they
	// would stay running under this engine's live lease, never started.
	type lostClaim struct {
		engine string
		lease  int64
	}
	var unsure []lostClaim
	for {
		for len(unsure) > 0 && ctx.Err() == nil {
			n, err := e.store.ReleaseLease(ctx, unsure[0].engine, unsure[0].lease)
			if err != nil {
				e.logErr(ctx, "release a failed claim", err)
				break
			}
			if n > 0 {
				e.log.Warn("released steps of a claim whose reply was lost", "count", n, "lease_id", unsure[0].lease)
			}
			unsure = unsure[1:]
		}
		n := e.slots.TryTake(e.cfg.Concurrency)
		got := 0
		if n > 0 {
			id := e.ID()
			lease := rand.Int64N(1<<62) + 1
			claimed, err := e.store.ClaimSteps(ctx, store.ClaimParams{
				EngineID: id, Limit: n, Handlers: e.handlerNames(), Caps: e.cfg.NamespaceCaps, TaskID: e.onlyTask, LeaseID: lease,
			})
			switch {
			case errors.Is(err, store.ErrEngineLost):
				// The identity the claim was made with, not the current one:
				// the heartbeat may have registered a new one meanwhile.
				e.declaredDead(ctx, id)
			case err != nil && ctx.Err() == nil:
				e.log.Error("claim failed", "engine_id", id, "error", err)
				unsure = append(unsure, lostClaim{id, lease})
			}
			got = len(claimed)
			for _, c := range claimed {
				e.Publish(Event{Kind: EventClaimed, Namespace: c.Namespace, Workflow: c.Workflow, TaskID: c.TaskID, Step: c.Name, Handler: c.Handler, Attempt: c.Attempts})
				e.launch(c)
			}
			e.slots.Return(n - got)
		}
		if got > 0 && got == n {
			continue // there may be more ready work
		}
		timer.Reset(jitter(e.cfg.PollInterval))
		select {
		case <-ctx.Done():
			return
		case <-e.store.Wake():
			e.Publish(Event{Kind: EventReady})
		case <-e.slots.Changed():
		case <-timer.C:
		}
	}
}

func jitter(d time.Duration) time.Duration {
	return d - d/5 + time.Duration(rand.Int64N(int64(d)/5*2+1))
}

// heartbeatLoop renews the engine's lease and stops handlers whose steps
// were cancelled or taken over elsewhere.
func (e *Engine) heartbeatLoop(ctx context.Context) {
	defer e.loops.Done()
	t := time.NewTicker(e.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		e.mu.Lock()
		inflight := make([]store.Fence, 0, len(e.inflight))
		for _, r := range e.inflight {
			inflight = append(inflight, r.fence)
		}
		id := e.engineID
		e.mu.Unlock()
		hb, err := e.store.Heartbeat(ctx, store.HeartbeatParams{EngineID: id, Now: time.Now(), Held: inflight})
		lost := hb.Lost
		switch {
		case errors.Is(err, store.ErrEngineLost):
			e.declaredDead(ctx, id)
		case err != nil:
			if ctx.Err() == nil {
				e.log.Error("heartbeat failed", "engine_id", id, "error", err)
			}
		case len(lost) > 0:
			e.cancelFences(lost, errLeaseLost)
		}
	}
}

// declaredDead handles the store's word that the engine lost was declared
// dead (it stalled past its lease): its in-flight work belongs to others now,
// so it drops it and registers under a new identity. The claim loop and the
// heartbeat may both notice: only the first acts.
func (e *Engine) declaredDead(ctx context.Context, lost string) {
	// One rejoin at a time: the loops that hear the news together must not
	// each register a new identity.
	e.rejoin.Lock()
	defer e.rejoin.Unlock()
	e.mu.Lock()
	if e.engineID != lost {
		e.mu.Unlock()
		return
	}
	for _, r := range e.inflight {
		r.cancel(errLeaseLost)
	}
	e.mu.Unlock()
	e.log.Warn("engine was declared dead; dropping in-flight work and registering again", "engine_id", lost)
	var b [4]byte
	_, _ = crand.Read(b[:])
	id := fmt.Sprintf("%s-%d-%s", e.host, os.Getpid(), hex.EncodeToString(b[:]))
	// The new identity is used only once it is registered: a heartbeat or
	// claim under an identity the store does not know yet would be taken
	// for another death. If registering fails, the loops keep hearing that
	// the old one is dead and come back here.
	if err := e.store.RegisterEngine(ctx, store.EngineInfo{ID: id, Host: e.host, PID: os.Getpid(), StartedAt: time.Now()}); err != nil {
		e.log.Error("register engine again", "engine_id", id, "error", err)
		return
	}
	e.mu.Lock()
	e.engineID = id
	e.mu.Unlock()
}

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
	for {
		sleep := jitter(e.cfg.PollInterval)
		if e.leading(time.Now()) {
			sleep = min(sleep, max(time.Until(e.leadRenew), 0))
			if next, ok, err := e.store.NextWake(ctx); err == nil && ok {
				sleep = min(sleep, max(time.Until(next), 0))
			}
		}
		timer.Reset(sleep)
		select {
		case <-ctx.Done():
			return
		case <-e.nudge:
			continue
		case <-timer.C:
		}
		e.lead(ctx)
		leader := e.leading(time.Now())
		if leader {
			e.timed(ctx)
		}
		// Every tick looks for dead processes on this host (a read); the
		// leader's full reap, which also catches stopped and silent
		// engines, runs every reapEvery.
		if e.reap(ctx, leader, leader && time.Since(lastReap) >= reapEvery) && leader {
			lastReap = time.Now()
		}
	}
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

// timed promotes and expires what is due, writing only when something is.
func (e *Engine) timed(ctx context.Context) {
	next, ok, err := e.store.NextWake(ctx)
	if err != nil || !ok || next.After(time.Now()) {
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

func (e *Engine) logErr(ctx context.Context, what string, err error) {
	if ctx.Err() == nil {
		e.log.Error(what+" failed", "engine_id", e.ID(), "error", err)
	}
}

// completer writes outcomes in batches: it waits for one, takes whatever
// else is queued, and writes them in one transaction, so an idle engine
// records at once and a busy one batches.
func (e *Engine) completer() {
	defer close(e.done)
	const maxBatch = 512
	batch := make([]store.Outcome, 0, maxBatch)
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
		for _, o := range batch {
			if o.State == state.StepWaiting {
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
// outcome is never dropped because the database was busy for a moment.
func (e *Engine) writeOutcomes(batch []store.Outcome) {
	backoff := 10 * time.Millisecond
	for {
		results, err := e.store.CompleteSteps(e.flushCtx, batch)
		if err == nil {
			for i, r := range results {
				if r != nil {
					e.log.Warn("outcome refused", "step_id", batch[i].Fence.StepID, "attempt", batch[i].Fence.Attempt, "error", r)
				}
			}
			return
		}
		if e.flushCtx.Err() != nil {
			// Stop's deadline passed with the database unreachable: the
			// steps stay running under this engine's lease and are
			// reclaimed and run again once it is marked stopped or lapses.
			e.log.Error("shutdown deadline passed before outcomes could be recorded; their steps will be reclaimed",
				"count", len(batch), "error", err)
			return
		}
		e.log.Error("record outcomes failed, retrying", "count", len(batch), "error", err)
		select {
		case <-time.After(backoff):
		case <-e.flushCtx.Done():
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}
