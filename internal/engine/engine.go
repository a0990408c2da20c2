// Package engine is weft's runtime: it claims ready steps from the store,
// runs them on a bounded pool of slots, and records their outcomes in
// batches. It owns the one lifecycle of a step (claim, run, complete, fail,
// retry, snooze, time out, progress, checkpoint) for every way of running
// one: the Go handlers registered in this process and the remote workers
// that the REST server's worker protocol serves. The root package weft is
// its public face; transports call it and hold no lifecycle of their own.
//
// The files follow the path of a step: submit.go (tasks in), claimer.go,
// executor.go and run.go (handlers), outcome.go (what an attempt's end
// means under the step's policy), completer.go (outcomes out, batched),
// remote.go (the same lifecycle for remote workers), heartbeat.go (the
// engine's lease), overdue.go (deadlines) and stop.go (Stop's drain). The
// services beside it run
// on their own state: internal/maintenance (the leader: reaper, timers,
// schedules, retention), internal/admin (the operator's operations),
// internal/webhook, internal/loadgate, internal/health and internal/event.
package engine

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/weftrun/weft/internal/admin"
	"github.com/weftrun/weft/internal/broadcast"
	"github.com/weftrun/weft/internal/builtin"
	"github.com/weftrun/weft/internal/event"
	"github.com/weftrun/weft/internal/health"
	"github.com/weftrun/weft/internal/loadgate"
	"github.com/weftrun/weft/internal/maintenance"
	"github.com/weftrun/weft/internal/outbound"
	"github.com/weftrun/weft/internal/spans"
	"github.com/weftrun/weft/internal/version"
	"github.com/weftrun/weft/internal/webhook"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/workflow"
)

// Config configures an Engine; weft.Config documents each field and
// converts to it, so the two stay field for field the same.
type Config struct {
	Concurrency       int
	Namespaces        []string
	NamespaceCaps     map[string]int
	HeartbeatInterval time.Duration
	LeaseTTL          time.Duration
	PollInterval      time.Duration
	LeaderTTL         time.Duration
	ShutdownTimeout   time.Duration
	Logger            *slog.Logger
	HTTPClient        *http.Client
	ID                string
	UpkeepInterval    time.Duration
	StaleAfter        time.Duration
	TracerProvider    trace.TracerProvider
	Secrets           func(ctx context.Context, name string) (string, error)
	MaxPressure       map[string]float64
	PressureReader    loadgate.Reader
}

// The defaults of Config's fields, applied where a field is zero.
const (
	DefaultConcurrency = 10
	// MaxConcurrency bounds Concurrency: the engine keeps room for the
	// outcomes of as many steps, and a typo of a few zeros must not take
	// the machine's memory.
	MaxConcurrency           = 100_000
	DefaultHeartbeatInterval = 5 * time.Second
	DefaultLeaseTTL          = 30 * time.Second
	DefaultShutdownTimeout   = 30 * time.Second
)

func (c *Config) setDefaults() error {
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.Concurrency < 0 || c.Concurrency > MaxConcurrency {
		return fmt.Errorf("config: Concurrency must be from 1 to %d, got %d", MaxConcurrency, c.Concurrency)
	}
	if err := workflow.CheckNames(c.Namespaces); err != nil {
		var ne *workflow.NameError
		errors.As(err, &ne)
		return fmt.Errorf("config: Namespaces[%d]: %w", ne.Index, err)
	}
	for ns, n := range c.NamespaceCaps {
		if n <= 0 {
			return fmt.Errorf("cap for namespace %q must be positive, got %d", ns, n)
		}
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.HeartbeatInterval, DefaultHeartbeatInterval)
	def(&c.LeaseTTL, DefaultLeaseTTL)
	def(&c.PollInterval, time.Second)
	def(&c.LeaderTTL, max(10*time.Second, 3*c.PollInterval))
	def(&c.ShutdownTimeout, DefaultShutdownTimeout)
	def(&c.UpkeepInterval, time.Minute)
	def(&c.StaleAfter, store.DefaultStaleAfter)
	if c.LeaseTTL < 2*c.HeartbeatInterval {
		return fmt.Errorf("config: LeaseTTL (%s) must be at least twice HeartbeatInterval (%s)", c.LeaseTTL, c.HeartbeatInterval)
	}
	if c.LeaderTTL < 3*c.PollInterval {
		return fmt.Errorf("config: LeaderTTL (%s) must be at least three times PollInterval (%s)", c.LeaderTTL, c.PollInterval)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{Timeout: 5 * time.Minute, Transport: outbound.Transport()}
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
	cfg   Config
	store store.Store
	log   *slog.Logger
	host  string
	// exec runs the engine's own handlers; completer writes the outcomes
	// of attempts in batches.
	exec      executor
	completer completer

	mu       sync.Mutex
	started  bool
	stopping bool
	// draining is closed when the first Stop begins: nothing more is
	// claimed, for this engine or its remote workers. stopped is closed
	// when that Stop returns; hurry, closed once (hurryOnce), ends its
	// drain for a later Stop whose ctx ended.
	draining  chan struct{}
	stopped   chan struct{}
	hurry     chan struct{}
	hurryOnce sync.Once
	engineID  string
	cancelRun context.CancelFunc // stops the loops
	loops     sync.WaitGroup
	// cancelBeat stops the heartbeat loop, which Stop keeps running
	// until the engine's last handler returned and its outcome was
	// recorded: a draining engine keeps its leases and hears
	// cancellations. beating waits for it.
	cancelBeat context.CancelFunc
	beating    sync.WaitGroup
	rejoin     sync.Mutex       // serialises re-registration after being declared dead
	waits      waits            // the tasks Wait waits for (wait.go)
	ready      broadcast.Signal // fires when the store readies steps
	// maint reaps, fires what is due and keeps retention while this
	// engine holds the maintenance lease.
	maint *maintenance.Leader
	// admin runs the operator's operations.
	admin *admin.Admin
	// hooks delivers webhooks while this engine leads.
	hooks *webhook.Deliverer
	// spans writes the task and step spans of tasks that ended, on the
	// maintenance leader (package spans).
	spans    *spans.Writer
	onlyTask int64 // when set, claim only this task's steps (RunTask)
	values   values
	// events delivers the lifecycle events to subscribers.
	events event.Bus

	// monitor records the loops' failures and the file check's verdict.
	monitor *health.Monitor
	// defs holds the workflow definitions.
	defs Definitions
	// workers serves the remote workers.
	workers Workers
	// clock is the time schedules are planned by; tests replace it.
	clock func() time.Time
	// tracer makes the spans of submissions and attempts (trace.go).
	tracer tracer
	// loadGate holds claims back while the host is under pressure; nil when
	// no threshold is set.
	loadGate *loadgate.Gate
	// execGuard kills what exec steps started when this process dies;
	// Stop closes it once the handlers returned.
	execGuard *builtin.Guard
	// schedules registers and fires cron schedules (schedules.go).
	schedules scheduler
	// funcs runs durable functions' steps, with what this engine's runs of
	// them made (function.go, resume.go).
	funcs functions
}

// running is one handler in flight.
type running struct {
	fence  store.Fence
	cancel context.CancelCauseFunc
	// step is the claimed step (its priority and whether it is
	// preemptible); preempted is set once the engine preempted it.
	step      *store.ClaimedStep
	preempted bool
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
		return nil, errors.New("nil store")
	}
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	gate, err := loadgate.New(cfg.MaxPressure, cfg.PressureReader, cfg.Logger)
	if err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	e := &Engine{
		loadGate:  gate,
		cfg:       cfg,
		store:     s,
		log:       cfg.Logger,
		host:      host,
		draining:  make(chan struct{}),
		stopped:   make(chan struct{}),
		hurry:     make(chan struct{}),
		engineID:  cfg.ID,
		clock:     time.Now,
		execGuard: builtin.NewGuard(),
	}
	e.monitor = health.New(s, e.log, cfg.PollInterval, e.ID)
	e.admin = admin.New(s, e.log, e.ID, func(f []store.Fence) { e.exec.cancelFences(f, errTaskCancelled) },
		func() time.Time { return e.clock() }, cfg.StaleAfter)
	e.hooks = webhook.New(s, e.log, cfg.PollInterval, e.admin.RequireFilter)
	if cfg.TracerProvider != nil {
		e.tracer = tracer{version.Tracer(cfg.TracerProvider)}
	}
	e.spans = spans.NewWriter(s, e.tracer.t, e.log, cfg.PollInterval)
	e.maint = maintenance.New(s, maintenance.Config{ID: e.ID, Host: host, LeaseTTL: cfg.LeaseTTL, PollInterval: cfg.PollInterval,
		LeaderTTL: cfg.LeaderTTL, UpkeepInterval: cfg.UpkeepInterval, StaleAfter: cfg.StaleAfter, Logger: e.log,
		Health: e.monitor, Events: &e.events, Followers: []interface{ Lead(bool) }{e.hooks, e.spans}, Overdue: e.overdue,
		FireSchedules: func(ctx context.Context) error {
			if e.onlyTask != 0 {
				return nil // weft run drives one task and fires nothing else
			}
			return e.schedules.fire(ctx, e.clock())
		}})
	e.schedules = scheduler{store: s, log: e.log, events: &e.events, prepare: e.prepare, engineID: e.ID, nudge: e.maint.Nudge}
	e.exec.init(e)
	e.defs = Definitions{e: e, workflows: map[string]*workflow.Workflow{}, reading: map[string]chan struct{}{}}
	e.funcs.store, e.funcs.defs = s, &e.defs
	e.workers.e = e
	e.completer.init(e)
	e.registerBuiltins()
	return e, nil
}

// LoadGate returns the state of the engine's load gate.
func (e *Engine) LoadGate() loadgate.State { return e.loadGate.State() }

// Events returns the bus of the engine's lifecycle events.
func (e *Engine) Events() *event.Bus { return &e.events }

// Definitions returns the engine's workflow definitions.
func (e *Engine) Definitions() *Definitions { return &e.defs }

// Workers returns what serves the engine's remote workers.
func (e *Engine) Workers() *Workers { return &e.workers }

// Admin returns the operator's operations on the engine's store.
func (e *Engine) Admin() *admin.Admin { return e.admin }

// Maintenance returns the engine's maintenance leader.
func (e *Engine) Maintenance() *maintenance.Leader { return e.maint }

// Health returns the engine's health.
func (e *Engine) Health() health.Health { return e.monitor.Health() }

// Webhooks returns the engine's webhook deliverer, which holds the
// operations on webhooks.
func (e *Engine) Webhooks() *webhook.Deliverer { return e.hooks }

// Store returns the engine's store.
func (e *Engine) Store() store.Store { return e.store }

// Running reports whether the engine has started and is not stopping.
func (e *Engine) Running() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.started && !e.stopping
}

// ID returns the engine's id as recorded in leases and the audit log.
func (e *Engine) ID() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.engineID
}

// Start registers the engine in the store and starts claiming steps. It
// returns once the engine runs; call Stop to end it.
func (e *Engine) Start(ctx context.Context) error {
	e.mu.Lock()
	if e.started {
		e.mu.Unlock()
		return errors.New("engine already started")
	}
	e.started = true
	id := e.engineID
	e.mu.Unlock()
	if err := e.store.RegisterEngine(ctx, e.exec.engineInfo(id)); err != nil {
		e.mu.Lock()
		e.started = false
		e.mu.Unlock()
		return fmt.Errorf("start engine: %w", err)
	}
	// Tasks that end from now on get their spans.
	if err := e.spans.Start(ctx); err != nil {
		e.log.Warn("task spans: read the history's end", "error", err)
	}
	// Reclaim at once what dead engines on this host left behind.
	e.maint.FirstRound(ctx)
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	e.cancelRun = cancel
	beatCtx, cancelBeat := context.WithCancel(context.WithoutCancel(ctx))
	e.cancelBeat = cancelBeat
	// The completer takes outcomes before the first claim can make one.
	e.completer.start()
	e.beating.Add(1)
	go e.exec.heartbeat(beatCtx)
	e.loops.Add(4)
	go e.exec.run(runCtx)
	go func() {
		defer e.loops.Done()
		e.spans.Run(runCtx)
	}()
	go func() {
		defer e.loops.Done()
		e.maint.Run(runCtx)
	}()
	go func() {
		defer e.loops.Done()
		e.hooks.Run(runCtx)
	}()
	e.log.Info("engine started", "engine_id", id, "concurrency", e.cfg.Concurrency,
		"lease_ttl_ms", e.cfg.LeaseTTL.Milliseconds(), "heartbeat_interval_ms", e.cfg.HeartbeatInterval.Milliseconds())
	return nil
}
