package weft

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"runtime/debug"
	"sync"
	"time"

	"github.com/weftrun/weft/internal/outcome"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// Handler runs one attempt of a step. Its result is encoded as JSON, stored
// and passed to dependent steps. Returning an error fails the attempt: it is
// retried by the step's policy unless it is Permanent; RetryAfter picks the
// delay, Snooze waits without failing. The context is cancelled on timeout,
// task cancellation or engine shutdown.
type Handler func(ctx context.Context, a *Attempt) (any, error)

// Attempt is what a handler sees of the step it runs.
type Attempt struct {
	TaskID   int64
	Workflow string // namespace/name@version
	Step     string
	// Number is 1 for the first attempt.
	Number int
	// Input is the task's JSON input.
	Input json.RawMessage
	// Deps holds the results of the step's dependencies by step name.
	Deps map[string]json.RawMessage
	// Config is the step's static configuration from its definition.
	Config json.RawMessage
	// Checkpoint is the last checkpoint saved by an earlier attempt, or nil.
	Checkpoint json.RawMessage
	// Batch is the item an item step of a batch works on, or nil.
	Batch json.RawMessage

	engine *Engine
	fence  store.Fence
	mu     sync.Mutex
	slot   bool // holds a slot
}

// Bind decodes the task input into v.
func (a *Attempt) Bind(v any) error {
	if err := json.Unmarshal(a.Input, v); err != nil {
		return Permanent(fmt.Errorf("decode input of task %d: %w", a.TaskID, err))
	}
	return nil
}

// Dep decodes the result of the named dependency into v.
func (a *Attempt) Dep(name string, v any) error {
	raw, ok := a.Deps[name]
	if !ok {
		return Permanent(fmt.Errorf("step %q has no dependency %q", a.Step, name))
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return Permanent(fmt.Errorf("decode result of %q: %w", name, err))
	}
	return nil
}

// SaveCheckpoint stores v (as JSON) so that a later attempt of this step,
// after a crash or a retry, starts from it. The write is fenced: it fails
// with an error wrapping store.ErrStaleLease if the step was taken over.
func (a *Attempt) SaveCheckpoint(ctx context.Context, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode checkpoint: %w", err)
	}
	if err := a.engine.store.SaveCheckpoint(ctx, a.fence, b); err != nil {
		return fmt.Errorf("save checkpoint of step %q: %w", a.Step, err)
	}
	a.Checkpoint = b
	return nil
}

// DeferUntil waits until cond reports true, checking it every interval,
// with the handler's slot released: other steps run on this engine
// meanwhile, and the step shows the sub-status "deferred". It re-acquires a
// slot before returning. It returns early with an error if cond fails or ctx
// ends.
func (a *Attempt) DeferUntil(ctx context.Context, cond func(context.Context) (bool, error), interval time.Duration) error {
	if interval <= 0 {
		return errors.New("weft: DeferUntil interval must be positive")
	}
	if ok, err := cond(ctx); err != nil || ok {
		return err
	}
	if err := a.engine.store.SetDeferred(ctx, a.fence, a.engine.ID(), true); err != nil {
		return fmt.Errorf("defer step %q: %w", a.Step, err)
	}
	a.releaseSlot()
	a.engine.log.Debug("step deferred", "task_id", a.TaskID, "step", a.Step, "attempt", a.Number)
	waitErr := func() error {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-t.C:
			}
			ok, err := cond(ctx)
			if err != nil {
				return err
			}
			if ok {
				return nil
			}
		}
	}()
	if err := a.engine.slots.Take(ctx); err != nil {
		return errors.Join(waitErr, context.Cause(ctx))
	}
	a.mu.Lock()
	a.slot = true
	a.mu.Unlock()
	if waitErr != nil {
		return waitErr
	}
	if err := a.engine.store.SetDeferred(ctx, a.fence, a.engine.ID(), false); err != nil {
		return fmt.Errorf("resume step %q: %w", a.Step, err)
	}
	return nil
}

func (a *Attempt) releaseSlot() {
	a.mu.Lock()
	held := a.slot
	a.slot = false
	a.mu.Unlock()
	if held {
		a.engine.slots.Release()
	}
}

// Permanent marks err as not worth retrying: the step fails at once.
func Permanent(err error) error { return &outcome.PermanentError{Err: err} }

// RetryAfter fails the attempt and asks for the next one after d instead of
// the policy's backoff. The policy's max attempts still applies.
func RetryAfter(d time.Duration, err error) error {
	return &outcome.RetryAfterError{Err: err, Delay: d}
}

// Snooze ends the attempt without failing it: the step waits durably for d
// (holding no slot and no goroutine, surviving restarts) and then runs again
// with the same attempt number.
func Snooze(d time.Duration) error { return &outcome.SnoozeError{Delay: d} }

// Typed adapts a function on typed input and result to a Handler: the task
// input is decoded into In and the result encoded from Out.
func Typed[In, Out any](fn func(ctx context.Context, a *Attempt, in In) (Out, error)) Handler {
	return func(ctx context.Context, a *Attempt) (any, error) {
		var in In
		if len(a.Input) > 0 {
			if err := a.Bind(&in); err != nil {
				return nil, err
			}
		}
		return fn(ctx, a, in)
	}
}

// launch starts the handler of a claimed step on the slot taken for it.
func (e *Engine) launch(c store.ClaimedStep) {
	ctx, cancel := context.WithCancelCause(context.Background())
	e.mu.Lock()
	e.inflight[c.ID] = &running{fence: c.Fence, cancel: cancel}
	e.mu.Unlock()
	e.handlerWG.Add(1)
	go func() {
		defer e.handlerWG.Done()
		defer cancel(nil)
		start := time.Now()
		o, record := e.execute(ctx, c)
		e.publishEnded(c, o, record, time.Since(start))
		e.mu.Lock()
		delete(e.inflight, c.ID)
		e.mu.Unlock()
		if record {
			e.outbox <- o
		}
	}()
}

// execute runs the handler and turns what it returned into an outcome.
// record is false when the outcome must not be written: the step was
// cancelled or taken over, or the engine is shutting down and leaves it to
// be reclaimed.
func (e *Engine) execute(ctx context.Context, c store.ClaimedStep) (o store.Outcome, record bool) {
	log := &stepLog{logger: e.log, c: &c, took: -1}
	a := &Attempt{TaskID: c.TaskID, Workflow: c.Namespace + "/" + c.Workflow + "@" + c.Version, Step: c.Name, Number: c.Attempts, Input: c.Input, Deps: c.Deps,
		Checkpoint: c.Checkpoint, Batch: c.Item, engine: e, fence: c.Fence, slot: true}
	defer a.releaseSlot()
	o = store.Outcome{Fence: c.Fence, EngineID: e.ID()}
	w, def, err := e.claimedDefinition(ctx, c)
	switch {
	case err != nil && !errors.Is(err, store.ErrNotFound):
		// A passing database error: try again soon without using up an attempt.
		o.State, o.RunAt, o.Snooze, o.Reason = state.StepWaiting, time.Now().Add(time.Second), true, err.Error()
		log.Warn("could not load the workflow definition; retrying", "error", err)
		return o, true
	case err != nil:
		o.State, o.Error = state.StepFailed, err.Error()
		return o, true
	}
	if def.When != "" {
		ok, err := e.condition(def.When, c)
		switch {
		case err != nil:
			o.State, o.Error = state.StepFailed, fmt.Sprintf("when: %v", err)
			log.Error("step condition failed", "error", err)
			return o, true
		case !ok:
			o.State, o.Reason = state.StepSkipped, fmt.Sprintf("when: %s is false", def.When)
			log.Debug("step skipped by its condition")
			return o, true
		}
	}
	a.Config = def.Config
	e.mu.Lock()
	h := e.handlers[c.Handler]
	e.mu.Unlock()
	if h == nil {
		o.State, o.Error = state.StepFailed, fmt.Sprintf("no handler %q is registered on this engine", c.Handler)
		return o, true
	}
	if def.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, time.Duration(def.Timeout), fmt.Errorf("step timed out after %s", time.Duration(def.Timeout)))
		defer cancel()
	}
	start := time.Now()
	result, err := call(ctx, h, a)
	log.took = time.Since(start)
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, errTaskCancelled), errors.Is(cause, errLeaseLost):
		log.Info("step stopped", "reason", cause.Error())
		return o, false
	case errors.Is(cause, errShutdown):
		log.Warn("step interrupted by shutdown; it will be reclaimed")
		return o, false
	case err != nil && ctx.Err() != nil && cause != nil:
		err = fmt.Errorf("%w (%v)", cause, err)
	}
	var snooze *outcome.SnoozeError
	var after *outcome.RetryAfterError
	switch {
	case err == nil:
		b, merr := json.Marshal(result)
		if merr != nil {
			o.State, o.Error = state.StepFailed, fmt.Sprintf("result is not JSON-encodable: %v", merr)
			break
		}
		if raw, ok := result.(json.RawMessage); ok && !json.Valid(raw) {
			o.State, o.Error = state.StepFailed, "result is not valid JSON"
			break
		}
		completion(&o, w, def, b)
		if o.State == state.StepCompleted {
			log.Debug("step completed")
			return o, true
		}
	case errors.As(err, &snooze):
		o.State, o.RunAt, o.Snooze, o.Reason = state.StepWaiting, time.Now().Add(snooze.Delay), true, snooze.Error()
		log.Info("step snoozed", "until", o.RunAt)
		return o, true
	case errors.As(err, &after):
		failure(&o, def, c.Attempts, err.Error(), outcome.IsPermanent(err), &after.Delay)
	default:
		failure(&o, def, c.Attempts, err.Error(), outcome.IsPermanent(err), nil)
	}
	if o.State == state.StepWaiting {
		log.Warn("step failed, will retry", "error", o.Error, "retry_at", o.RunAt)
	} else {
		log.Error("step failed", "error", o.Error)
	}
	return o, true
}

// completion sets o to the completion of a step with a JSON result, with
// the decision or batch the result makes for the step's type; a result that
// does not fit the type fails the step for good.
func completion(o *store.Outcome, w *Workflow, def *Step, result json.RawMessage) {
	if err := dynamicResult(w, def, result, o); err != nil {
		o.State, o.Error = state.StepFailed, err.Error()
		return
	}
	o.State, o.Result = state.StepCompleted, result
}

// failure sets o to the outcome of a failed attempt under the step's retry
// policy: a failure for good when it is permanent or the attempts are used
// up, else a retry after the delay asked for (after, when not nil) or the
// policy's backoff.
func failure(o *store.Outcome, def *Step, attempt int, msg string, permanent bool, after *time.Duration) {
	policy := def.Retry.resolve()
	o.Error = msg
	switch {
	case permanent:
		o.State = state.StepFailed
	case policy.Exhausted(attempt):
		o.State, o.Error = state.StepFailed, fmt.Sprintf("%s (attempt %d of %d)", msg, attempt, policy.MaxAttempts)
	case after != nil:
		o.State, o.RunAt = state.StepWaiting, time.Now().Add(*after)
	default:
		o.State, o.RunAt = state.StepWaiting, time.Now().Add(policy.Delay(attempt, randFloat))
	}
	if o.State == state.StepWaiting {
		o.Reason = "retry scheduled: " + o.Error
	}
}

// stepLog logs about one attempt of a claimed step, with its task, step and
// attempt and, once the handler returned, its duration. It builds a record
// only when its level is enabled: execute runs for every step, and how most
// steps end (completed, at Debug) is usually not logged.
type stepLog struct {
	logger *slog.Logger
	c      *store.ClaimedStep
	took   time.Duration // negative until the handler returned
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
	r.Add("task_id", l.c.TaskID, "step", l.c.Name, "attempt", l.c.Attempts)
	if l.took >= 0 {
		r.Add("duration_ms", l.took.Milliseconds())
	}
	r.Add(args...)
	_ = h.Handle(ctx, r)
}

// call runs the handler, turning a panic into an error.
func call(ctx context.Context, h Handler, a *Attempt) (result any, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("handler panicked: %v", r)
			a.engine.log.Error("handler panicked", "task_id", a.TaskID, "step", a.Step, "attempt", a.Number, "panic", fmt.Sprint(r),
				"stack", string(debug.Stack()))
		}
	}()
	return h(ctx, a)
}
