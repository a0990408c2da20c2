package weft

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/weftrun/weft/internal/engine"
	"github.com/weftrun/weft/internal/outcome"
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
	// Deadline is when the step's timeout passes (the context ends then);
	// zero when it has none.
	Deadline time.Time

	run *engine.Run
}

// Handle registers the Go handler for a handler name used by workflow steps.
// Registering a name twice replaces the earlier handler. It panics for the
// names of the engine's own handlers, weft.signal and weft.workflow, which
// signal and sub-workflow steps run.
func (e *Engine) Handle(name string, h Handler) {
	e.core.Handle(name, func(ctx context.Context, r *engine.Run) (any, error) {
		return h(ctx, &Attempt{TaskID: r.TaskID, Workflow: r.Workflow, Step: r.Step, Number: r.Number, Input: r.Input, Deps: r.Deps,
			Config: r.Config, Checkpoint: r.Checkpoint, Batch: r.Batch, Deadline: r.Deadline, run: r})
	})
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
// with an error wrapping ErrStaleLease if the step was taken over.
func (a *Attempt) SaveCheckpoint(ctx context.Context, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode checkpoint: %w", err)
	}
	if err := a.run.SaveCheckpoint(ctx, b); err != nil {
		return err
	}
	a.Checkpoint = b
	return nil
}

// Progress records how far the handler got, a fraction from 0 to 1 and a
// message (at most 4 KiB), shown by "weft task". The write is fenced like
// SaveCheckpoint.
func (a *Attempt) Progress(ctx context.Context, fraction float64, message string) error {
	return a.run.Progress(ctx, fraction, message)
}

// DeferUntil waits until cond reports true, checking it every interval,
// with the handler's slot released: other steps run on this engine
// meanwhile, and the step shows the sub-status "deferred". It re-acquires a
// slot before returning. It returns early with an error if cond fails or ctx
// ends.
func (a *Attempt) DeferUntil(ctx context.Context, cond func(context.Context) (bool, error), interval time.Duration) error {
	return a.run.DeferUntil(ctx, cond, interval)
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
