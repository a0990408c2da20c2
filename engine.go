// Package weft is a durable workflow orchestration engine: a DAG of steps
// that survives crashes, persisted in an embedded SQLite file or in
// PostgreSQL shared by many engines.
//
// Open a store (weftdb.Open picks the backend from a URL), create an engine
// on it, register workflows (built with workflow.New or loaded from YAML
// with workflow.Load) and the Go handlers they name, start it, and submit
// tasks:
//
//	db, err := weftdb.Open(ctx, "weft.db", weftdb.Options{})
//	defer db.Close()
//	e, err := weft.New(db, weft.Config{Concurrency: 8})
//	e.Handle("greet", func(ctx context.Context, a *weft.Attempt) (any, error) { ... })
//	e.Register(ctx, workflow.New("demo", "hello", "1").Step("greet", "greet"))
//	e.Start(ctx)
//	defer e.Stop(ctx)
//	res, err := e.Submit(ctx, weft.Submission{Workflow: "demo/hello", Input: map[string]any{"name": "Ada"}})
//
// This package holds the public API only; the runtime lives in
// internal/engine, the definitions in package workflow, the backends under
// store/. It imports no database driver.
package weft

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/weftrun/weft/internal/engine"
	"github.com/weftrun/weft/internal/health"
	"github.com/weftrun/weft/internal/loadgate"
	"github.com/weftrun/weft/store"
)

// Config configures an Engine. The zero value is usable.
type Config struct {
	// Concurrency is the number of handler slots: at most this many
	// handlers run at once. Default 10.
	Concurrency int
	// Namespaces, if set, makes the engine a dedicated pool: it claims
	// only the steps of tasks in these namespaces (as a remote worker
	// registered with namespaces does). Its share of the cluster's
	// maintenance is unchanged. Nil: every namespace.
	Namespaces []string
	// NamespaceCaps limits how many steps of a namespace run at once
	// across every engine sharing the database, for the claims of this
	// engine and of the remote workers it serves.
	//
	// Deprecated: a cap in one engine's configuration binds only that
	// engine's claims and changes only with a restart. Set namespace limits
	// in the database with SetLimits (or 'weft limit NS --concurrency N'),
	// where they bind every claim at once. Where both are set, the smaller
	// holds.
	NamespaceCaps map[string]int
	// HeartbeatInterval is how often the engine renews its lease on every
	// step it holds, in one write. Default 5s.
	HeartbeatInterval time.Duration
	// LeaseTTL is how long after its last heartbeat an engine is presumed
	// dead and its steps are returned to the queue. An engine on the same
	// host whose process is gone is detected within PollInterval (within
	// LeaseTTL/4 of its start if it died before the others listed the
	// engines, which they do every LeaseTTL/4). Default 30s.
	LeaseTTL time.Duration
	// PollInterval bounds how long work submitted by another process waits
	// before this engine looks for it. On a store that hears other
	// processes (PostgreSQL's LISTEN) such work wakes the engine at once,
	// and while it hears them the engine polls only every five
	// PollIntervals, as a fallback. Default 1s.
	PollInterval time.Duration
	// LeaderTTL is the lease of the maintenance leader: one engine per
	// database reaps lapsed engines, expires overdue work, fails steps past
	// their timeout and promotes steps whose time came. The leader renews
	// every LeaderTTL/3; when it dies another engine takes over within
	// LeaderTTL (at once when it stops, or when its process is found gone
	// on the same host). Default 10s or three times PollInterval,
	// whichever is longer; at least three times PollInterval.
	LeaderTTL time.Duration
	// ShutdownTimeout bounds how long Stop waits for running handlers when
	// its context has no deadline. Default 30s.
	ShutdownTimeout time.Duration
	// Logger receives the engine's logs. Default: slog.Default().
	Logger *slog.Logger
	// HTTPClient is used by the built-in http handler. Default: a client
	// with a 5 minute timeout and connections of its own (nothing else in
	// the process closes them under a request).
	HTTPClient *http.Client
	// ID names this engine in leases and the audit log. Default: host,
	// process id and a random suffix.
	ID string
	// UpkeepInterval is how often the maintenance leader applies retention
	// (deleting finished tasks past their workflow's or namespace's
	// retention, in small batches) and counts the tasks needing
	// attention. Default 1m.
	UpkeepInterval time.Duration
	// StaleAfter is how long a ready step may wait while no live engine or
	// remote worker serves its handler before its task needs attention.
	// Default 5m.
	StaleAfter time.Duration
	// TracerProvider, when set, receives OpenTelemetry spans: one per
	// submission ("send", a producer span), one per task ("task", from its
	// submission to its end) with one per step under it ("step", with its
	// waits and preemptions as events), and one per step attempt under its
	// step ("process", a consumer span from claim to outcome, with the
	// queue wait as weft.queue_wait_ms), named and attributed after the
	// messaging semantic conventions. Task and step spans need the
	// provider built with SpanIDs as its id generator. The traceparent of a submission (of
	// its span, or of the caller's context when tracing is off) is stored
	// with the task: every attempt of its steps, on any engine and after
	// any crash, belongs to that trace. Handlers get the attempt's span in
	// their context, exec steps TRACEPARENT in their environment, http
	// steps a traceparent header, and remote workers a traceparent in the
	// claimed step. Nil: no spans, at no cost.
	TracerProvider trace.TracerProvider
	// Secrets resolves the secrets that built-in steps name as
	// ${secret:NAME} in an http step's url, headers and body or an exec
	// step's env, when the step runs: the workflow stores only the
	// reference. A resolved value never leaves the handler: an error or
	// result quoting it has it replaced with [secret:NAME], so it is not
	// stored, logged or served. An error fails the step for good. Nil: a
	// step that names a secret fails. (The weft CLI looks secrets up in
	// WEFT_SECRET_<NAME> and in the files of --secrets-dir.)
	Secrets func(ctx context.Context, name string) (string, error)
	// MaxPressure is a load gate: while the host's pressure of a resource
	// is above its threshold, the engine claims no step (for its own
	// handlers; running steps go on) and claims again once every pressure
	// is at or below its threshold. Keys are "cpu", "io" and "memory";
	// values are percentages from 0 to 100 compared with the "some avg10"
	// line of Linux pressure stall information (/proc/pressure/<resource>,
	// Linux 4.20+ with PSI enabled), read at most once a second. New
	// refuses an unknown resource, a value out of range, and a host
	// without PSI. The state shows in LoadGate, the metrics
	// weft_load_gate_closed and weft_load_pressure_ratio, and one log line per
	// change. Nil: no gate, at no cost.
	MaxPressure map[string]float64
	// PressureReader reads the pressures MaxPressure compares. Nil reads
	// /proc/pressure; tests inject their own.
	PressureReader PressureReader
}

// The defaults of Config's fields, applied where a field is zero.
const (
	DefaultConcurrency       = engine.DefaultConcurrency
	MaxConcurrency           = engine.MaxConcurrency
	DefaultHeartbeatInterval = engine.DefaultHeartbeatInterval
	DefaultLeaseTTL          = engine.DefaultLeaseTTL
	DefaultShutdownTimeout   = engine.DefaultShutdownTimeout
	DefaultStaleAfter        = store.DefaultStaleAfter
)

// PressureReader reads the pressure of a resource ("cpu", "io" or
// "memory") in percent: the share of the last ten seconds in which some
// task waited for it (PSI "some avg10").
type PressureReader = loadgate.Reader

// The resources a load gate watches (Config.MaxPressure).
const (
	PressureCPU    = loadgate.CPU
	PressureIO     = loadgate.IO
	PressureMemory = loadgate.Memory
)

// ProcPressure is the default PressureReader: it reads the files of Linux
// pressure stall information under Dir (default /proc/pressure).
type ProcPressure = loadgate.ProcPressure

// LoadGateState is the state of an engine's load gate (Config.MaxPressure).
type LoadGateState = loadgate.State

// LoadGate returns the state of the engine's load gate; Enabled is false
// when MaxPressure is not set.
func (e *Engine) LoadGate() LoadGateState { return e.core.LoadGate() }

// FieldError is an ErrInvalid about one field of a submission or a
// request ("priority", "tags", "on_conflict"), with the problem: find it
// with errors.As. REST answers it 400 invalid_field with the field, the CLI
// exit status 2 naming the flag.
type FieldError = store.FieldError

// SubmissionError is the submission of a SubmitMany (or SubmitTx) that was
// refused, by its index from 0, with why (often a *FieldError); none of
// the call's tasks was submitted. REST answers the batch route's with the
// field as tasks[INDEX].FIELD.
type SubmissionError = engine.SubmissionError

// ConflictError is an ErrConflict with its reason ("task 7 is completed
// and cannot be cancelled"): find it with errors.As. REST answers it 409
// conflict with the reason as its message.
type ConflictError = store.ConflictError

// Errors returned by the engine; test with errors.Is.
var (
	// ErrNotFound: no task, step or workflow with that identity.
	ErrNotFound = store.ErrNotFound
	// ErrConflict: the action does not fit the current state.
	ErrConflict = store.ErrConflict
	// ErrInvalid: a definition, submission or signal that is not valid.
	// Where one field is at fault, the error is a *FieldError naming it.
	ErrInvalid = store.ErrInvalid
	// ErrStaleLease: a write about a step its writer no longer holds.
	ErrStaleLease = store.ErrStaleLease
	// ErrPreempted is the cause (context.Cause) of a preemptible step's
	// context when the engine preempted it for a ready step of higher
	// priority; its message names that step. The step returns to ready
	// with its checkpoint and its attempt given back, unless the handler
	// returns a result anyway, which completes it as usual.
	ErrPreempted = engine.ErrPreempted
	// ErrHandlersAbandoned: Stop returned without handlers that still ran
	// a grace period after their context was cancelled (they ignore
	// cancellation). Their steps are reclaimed and run again by another
	// engine; what they return is not recorded.
	ErrHandlersAbandoned = engine.ErrHandlersAbandoned
)

// Engine runs workflows: it claims ready steps from its store, runs their
// handlers on a bounded pool of slots and records their outcomes. Any number
// of engines may share one database.
type Engine struct {
	core *engine.Engine
}

// New returns an engine on an open store. The caller keeps ownership of the
// store: close it after stopping the engine.
func New(s store.Store, cfg Config) (*Engine, error) {
	if s == nil {
		return nil, errors.New("nil store")
	}
	core, err := engine.New(s, engine.Config(cfg))
	if err != nil {
		return nil, err
	}
	return &Engine{core: core}, nil
}

// APIKeys returns the REST API's keys in the engine's database: the
// server authenticates with them, the CLI creates, lists and revokes them.
func (e *Engine) APIKeys() store.Credentials { return e.core.Store() }

// Stats returns the aggregate reads of the engine's database behind the
// dashboard's overview (counts by state, recent activity).
func (e *Engine) Stats() store.Stats { return e.core.Store() }

// ID returns the engine's id as recorded in leases and the audit log.
func (e *Engine) ID() string { return e.core.ID() }

// Start registers the engine in the store and starts claiming steps. It
// returns once the engine runs; call Stop to end it.
func (e *Engine) Start(ctx context.Context) error { return e.core.Start(ctx) }

// Stop shuts the engine down gracefully: it stops claiming, waits for
// running handlers until ctx ends (or ShutdownTimeout when ctx has no
// deadline), then cancels the rest, records the outcomes it has (giving up
// two seconds after the deadline if the database is unreachable: those
// steps are reclaimed and run again), and marks the engine stopped so that
// what it left is reclaimed at once. Until its outcomes are recorded the
// engine keeps heartbeating: its steps keep their leases however long they
// run, and a task cancelled meanwhile, from any process, cancels its
// handler's context.
//
// A handler that still runs four seconds after its context was
// cancelled is left behind: Stop returns ErrHandlersAbandoned naming how
// many, and another engine reruns their steps.
//
// A Stop called while another drains waits for that one to finish and
// returns nil; if its ctx ends first, the drain ends there too: a second
// interrupt can cut a long drain short.
func (e *Engine) Stop(ctx context.Context) error { return e.core.Stop(ctx) }

// Running reports whether the engine has started and is not stopping.
func (e *Engine) Running() bool { return e.core.Running() }

// Health is a snapshot of an engine's own view of its work: the loops
// whose store calls keep failing (claim, heartbeat, maintenance,
// completer), a database file deleted or replaced under it
// (database_file), and the count of failed store calls by loop. A loop that
// fails backs off (the poll interval doubled per failure, up to 30 s) and
// logs when its failures double, not at every attempt.
type Health = health.Health

// Health returns the engine's health; weft serve reports it in
// /health/ready and as the metrics weft_engine_degraded and
// weft_engine_errors_total.
func (e *Engine) Health() Health { return e.core.Health() }

// ErrDatabaseGone is wrapped by the errors with which an engine refuses
// work once its SQLite file was deleted or replaced since it was opened.
var ErrDatabaseGone = store.ErrDatabaseGone

// ErrContended is wrapped by the errors of writes that kept clashing with
// concurrent ones on PostgreSQL (a deadlock or a serialization failure)
// after the store ran them again a few times: nothing was written; try
// again later.
var ErrContended = store.ErrContended

// RunTask starts the engine restricted to one task, runs that task to its
// end and stops the engine. It is what "weft run" does: other work in the
// database is left to other engines. If ctx ends first, the engine stops
// gracefully and the task stays in the database to be resumed.
func (e *Engine) RunTask(ctx context.Context, id int64) (*Task, error) {
	return e.core.RunTask(ctx, id)
}
