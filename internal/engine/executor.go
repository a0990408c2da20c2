package engine

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"runtime/debug"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/weftrun/weft/internal/builtin"
	"github.com/weftrun/weft/internal/slots"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/workflow"
)

// executor runs the engine's own handlers: its claim loop (run) claims
// ready steps for the free slots, launch runs their handlers and hands
// their outcomes to the completer, and it keeps the handlers in flight:
// their leases' heartbeat, their cancellation and preemption.
type executor struct {
	e     *Engine
	slots *slots.Pool

	// mu guards the handlers and the steps in flight.
	mu       sync.Mutex
	handlers map[string]Handler
	names    []string // sorted handler names, what the engine claims
	// namesChanged: handlers were registered since the engine last
	// advertised them (advertise).
	namesChanged bool
	inflight     map[int64]*running // by step id
	preemptible  int                // preemptible steps in inflight (preemption.go)
	lastPeek     time.Time          // when the claim loop last peeked for preemption

	handlerWG sync.WaitGroup
	// claiming: claims made in a write of the engine's own (a batch of
	// outcomes, a submission: claimInWrite), which Stop waits for before
	// the handlers.
	claiming sync.WaitGroup
	heldBack atomic.Bool // the claim loop's last claim left steps under a full limit
}

func (x *executor) init(e *Engine) {
	x.e, x.slots, x.handlers, x.inflight = e, slots.New(e.cfg.Concurrency), map[string]Handler{}, map[int64]*running{}
}

// Handle registers the handler for a handler name used by workflow steps.
// Registering a name twice replaces the earlier handler. It panics for a
// name the engine runs itself (weft.signal, weft.workflow): a handler of
// that name would run signal and sub-workflow steps as plain ones.
func (e *Engine) Handle(name string, h Handler) {
	if enginesOwn(name) {
		panic(fmt.Sprintf("weft: Handle(%q): the engine's own handler, which no other may replace", name))
	}
	e.handle(name, h)
}

// handle registers h for name, built-in or not.
func (e *Engine) handle(name string, h Handler) {
	x := &e.exec
	x.mu.Lock()
	defer x.mu.Unlock()
	x.handlers[name] = h
	x.names = make([]string, 0, len(x.handlers))
	for n := range x.handlers {
		x.names = append(x.names, n)
	}
	sort.Strings(x.names)
	x.namesChanged = true
}

// handlerNames returns the names the engine claims steps for. Handlers may
// be registered while the engine runs.
func (x *executor) handlerNames() []string {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.names
}

func (e *Engine) registerBuiltins() {
	e.handle("exec", func(ctx context.Context, r *Run) (any, error) {
		return builtin.Exec(ctx, r.builtinRequest())
	})
	e.handle("http", func(ctx context.Context, r *Run) (any, error) {
		return builtin.HTTP(ctx, e.cfg.HTTPClient, r.builtinRequest())
	})
	e.handle(workflow.SubWorkflowHandler, e.subWorkflow)
	e.handle(store.SignalHandler, func(ctx context.Context, r *Run) (any, error) {
		return nil, &signalWait{signal: r.claimed.Signal}
	})
}

func (r *Run) builtinRequest() builtin.Request {
	return builtin.Request{TaskID: r.TaskID, Step: r.Step, Attempt: r.Number, Input: r.Input, Deps: r.Deps, Config: r.Config,
		Checkpoint: r.Checkpoint, Batch: r.Batch, Report: r, Secrets: r.engine.cfg.Secrets, Guard: r.engine.execGuard}
}

// launch starts the handlers of claimed steps, each on the slot taken for
// it. All of them are in flight before any starts, so that the completer,
// woken by the first outcome, waits for the others of the claim too
// instead of writing a batch of the few that finished first. It returns
// the group of the handlers it started.
func (x *executor) launch(claimed []store.ClaimedStep) *launchGroup {
	type started struct {
		ctx    context.Context
		cancel context.CancelCauseFunc
	}
	runs := make([]started, len(claimed))
	x.mu.Lock()
	for i := range claimed {
		c := &claimed[i]
		ctx, cancel := context.WithCancelCause(context.Background())
		runs[i] = started{ctx, cancel}
		if old := x.inflight[c.ID]; old != nil && old.step.Preemptible {
			x.preemptible-- // an earlier attempt, taken back, still returning
		}
		x.inflight[c.ID] = &running{fence: c.Fence, cancel: cancel, step: c}
		if c.Preemptible {
			x.preemptible++
		}
	}
	x.mu.Unlock()
	x.handlerWG.Add(len(claimed))
	group := newLaunchGroup(len(claimed), time.Now())
	for i := range claimed {
		// The step stays in claimed, which the handler owns from here.
		c, ctx, cancel := &claimed[i], runs[i].ctx, runs[i].cancel
		go func() {
			defer x.handlerWG.Done()
			defer cancel(nil)
			start := time.Now()
			ctx, span := x.e.tracer.attemptContext(ctx, c, "")
			o, record, slot := x.execute(ctx, c)
			endAttempt(span, o, record)
			x.e.publishEnded(*c, o, record, time.Since(start), false, span)
			x.mu.Lock()
			// A later attempt of the step, claimed here after this one
			// was taken back, holds the entry: leave it.
			if r := x.inflight[c.ID]; r != nil && r.fence == c.Fence {
				delete(x.inflight, c.ID)
				if c.Preemptible {
					x.preemptible--
				}
			}
			x.mu.Unlock()
			group.returned()
			if record && slot != nil {
				// A failure under a circuit breaker is counted before
				// its slot claims again (see breakerFailure).
				reply := make(chan error, 1)
				if x.e.completer.send(report{outcome: o, launched: group, reply: reply}) {
					select {
					case <-reply:
					case <-x.e.completer.ctx.Done():
					}
				}
				slot()
			} else if record {
				x.e.completer.send(report{outcome: o, launched: group})
			}
		}()
	}
	return group
}

// breakerFailure reports whether outcome o counts as a failure of its
// step's circuit breaker: failed for good, or to be retried (not a
// snooze, nor the start of a child task). The store decides the same
// (sqlstore's breakerKind).
func breakerFailure(o store.Outcome) bool {
	switch o.State {
	case state.StepFailed:
		return true
	case state.StepWaiting, state.StepReady:
		return !o.Snooze && o.Child == nil
	}
	return false
}

// execute runs the handler of a claimed step and returns the outcome to
// record. record is false when nothing must be written: the step was
// cancelled or taken over, or the engine is shutting down and leaves it to
// be reclaimed. The handler's slot is released on return, except for a
// failure under a circuit breaker (breakerFailure): then slot releases it,
// for the caller to call once the failure is recorded, so that the slot
// claims again only under the breaker's new count.
func (x *executor) execute(ctx context.Context, c *store.ClaimedStep) (o store.Outcome, record bool, slot func()) {
	log := &stepLog{logger: x.e.log, c: c, took: -1, trace: trace.SpanContextFromContext(ctx).TraceID()}
	r := &Run{TaskID: c.TaskID, Workflow: versionRef(c.Namespace, c.Workflow, c.Version), Step: c.Name, Number: c.Attempts,
		Input: c.Input, Deps: c.Deps, Checkpoint: c.Checkpoint, Batch: c.Item, engine: x.e, log: log, fence: c.Fence, claimed: c, slot: true}
	var guarded bool // the step has a circuit breaker
	defer func() {
		if record && guarded && breakerFailure(o) {
			slot = r.releaseSlot
			return
		}
		r.releaseSlot()
	}()
	o = store.Outcome{Fence: c.Fence, EngineID: x.e.ID()}
	w, def, err := x.e.defs.claimedDefinition(ctx, *c)
	if err != nil {
		return x.e.defs.undefined(o, log, err), true, nil
	}
	guarded = def.CircuitBreaker != nil
	if skip, ok := x.e.defs.gate(&o, log, def, *c); !ok {
		return skip, true, nil
	}
	r.Config = def.Config
	x.mu.Lock()
	h := x.handlers[c.Handler]
	x.mu.Unlock()
	if h == nil {
		return x.e.defs.settle(o, log, w, def, c.Attempts, nil, failNow(fmt.Errorf("no handler %q is registered on this engine", c.Handler))), true, nil
	}
	if def.Timeout > 0 {
		timeout := time.Duration(def.Timeout)
		r.Deadline = time.Now().Add(timeout)
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadlineCause(ctx, r.Deadline, timedOut(timeout))
		defer cancel()
	}
	start := time.Now()
	result, err := call(ctx, h, r, log)
	log.took = time.Since(start)
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, errTaskCancelled), errors.Is(cause, errLeaseLost):
		log.Info("step stopped", "reason", cause.Error())
		return o, false, nil
	case errors.Is(cause, errShutdown):
		log.Warn("step interrupted by shutdown; it will be reclaimed")
		return o, false, nil
	case errors.Is(cause, ErrPreempted) && err != nil:
		// A handler that finished anyway (no error) completes as usual.
		return preempted(o, log, cause), true, nil
	case err != nil && ctx.Err() != nil && cause != nil && !errors.Is(err, cause):
		err = fmt.Errorf("%w (%v)", cause, err)
	}
	var raw json.RawMessage
	if err == nil {
		raw, err = encodeResult(result)
	}
	o = x.e.defs.settle(o, log, w, def, c.Attempts, raw, err)
	if c.Kind == store.KindCall && o.State == state.StepCompleted {
		x.e.funcs.after(ctx, c, &o)
	}
	return o, true, nil
}

// encodeResult encodes a handler's result; an error fails the step for good.
func encodeResult(result any) (json.RawMessage, error) {
	b, err := json.Marshal(result)
	if err != nil {
		return nil, failNow(fmt.Errorf("result is not JSON-encodable: %w", err))
	}
	if raw, ok := result.(json.RawMessage); ok && !json.Valid(raw) {
		return nil, failNow(errors.New("result is not valid JSON"))
	}
	return b, nil
}

// stepLog logs about one attempt of a claimed step, with its task, step and
// attempt and, once the handler returned, its duration. It builds a record
// only when its level is enabled: every step passes through it, and how most
// steps end (completed, at Debug) is usually not logged.
type stepLog struct {
	logger *slog.Logger
	c      *store.ClaimedStep
	took   time.Duration // negative until the handler returned
	remote string        // the remote worker that ran the step, if any
	trace  trace.TraceID // the trace the attempt belongs to; zero: none
}

func (l *stepLog) Debug(msg string, args ...any) { l.log(slog.LevelDebug, msg, args) }
func (l *stepLog) Info(msg string, args ...any)  { l.log(slog.LevelInfo, msg, args) }
func (l *stepLog) Warn(msg string, args ...any)  { l.log(slog.LevelWarn, msg, args) }
func (l *stepLog) Error(msg string, args ...any) { l.log(slog.LevelError, msg, args) }

func (l *stepLog) log(level slog.Level, msg string, args []any) {
	ctx := context.Background()
	h := l.logger.Handler()
	if !h.Enabled(ctx, level) {
		return
	}
	var pc [1]uintptr
	runtime.Callers(3, pc[:]) // the caller of Debug, Info, Warn or Error
	r := slog.NewRecord(time.Now(), level, msg, pc[0])
	r.Add("task_id", l.c.TaskID, "workflow", l.c.Namespace+"/"+l.c.Workflow, "step", l.c.Name, "attempt", l.c.Attempts)
	if l.trace.IsValid() {
		r.Add("trace_id", l.trace.String())
	}
	if l.took >= 0 {
		r.Add("duration_ms", l.took.Milliseconds())
	}
	if l.remote != "" {
		r.Add("worker_id", l.remote)
	}
	r.Add(args...)
	_ = h.Handle(ctx, r)
}

// call runs the handler, turning a panic into an error.
func call(ctx context.Context, h Handler, r *Run, log *stepLog) (result any, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("handler panicked: %v", p)
			log.Error("handler panicked", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
		}
	}()
	return h(ctx, r)
}

// inflightCount returns how many handlers run on this engine.
func (x *executor) inflightCount() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return len(x.inflight)
}

// running returns the steps whose handlers run on this engine, by id.
func (x *executor) running() []*store.ClaimedStep {
	x.mu.Lock()
	defer x.mu.Unlock()
	steps := make([]*store.ClaimedStep, 0, len(x.inflight))
	for _, r := range x.inflight {
		steps = append(steps, r.step)
	}
	slices.SortFunc(steps, func(a, b *store.ClaimedStep) int { return cmp.Compare(a.ID, b.ID) })
	return steps
}

// listenedPolls is how many poll intervals the claim loop waits for a
// wake-up while its store hears other processes' work.
const listenedPolls = 5

// claimPoll is how long the claim loop waits for a wake-up before it looks
// for ready work anyway: the poll interval, or listenedPolls of them while
// the store hears the steps other processes make ready (store.Listener).
// Polling then finds only what no notification announces: a breaker's
// cooldown that ended, a notification lost with the listener's connection
// (the store wakes the engine when it listens again). While its last claim
// left steps because a concurrency limit was full (heldBack), it polls every
// interval: room an outcome frees in another process is announced by
// nothing.
func (x *executor) claimPoll() time.Duration {
	if l, ok := x.e.store.(store.Listener); ok && l.Listening() && !x.heldBack.Load() {
		return listenedPolls * x.e.cfg.PollInterval
	}
	return x.e.cfg.PollInterval
}

// wakeWaiters wakes every remote claim waiting for work (e.ready).
func (e *Engine) wakeWaiters() { e.ready.Fire() }

func (x *executor) cancelAll(cause error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, r := range x.inflight {
		r.cancel(cause)
	}
}

// cancelFences stops the handlers holding the given fences.
func (x *executor) cancelFences(fences []store.Fence, cause error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, f := range fences {
		if r, ok := x.inflight[f.StepID]; ok && r.fence == f {
			r.cancel(cause)
		}
	}
}
