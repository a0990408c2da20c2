package weft

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// This file is what the engine offers to components that run steps outside
// it, such as the remote-worker API: the timing its reaper applies, the
// static config of a step, and the retry policy as its own handlers get it.

// LeaseTTL returns how long after its last heartbeat an engine, or a remote
// worker recorded as one, is presumed dead and its steps reclaimed.
func (e *Engine) LeaseTTL() time.Duration { return e.cfg.LeaseTTL }

// HeartbeatInterval returns how often the engine renews its leases.
func (e *Engine) HeartbeatInterval() time.Duration { return e.cfg.HeartbeatInterval }

// StepDefinition returns the definition of a claimed step (its config,
// retry policy and timeout) from its workflow version: the workflow's step,
// or for an item of a batch, the template it runs.
func (e *Engine) StepDefinition(ctx context.Context, c store.ClaimedStep) (*Step, error) {
	_, def, err := e.claimedDefinition(ctx, c)
	if err != nil {
		return nil, err
	}
	s := *def
	return &s, nil
}

// claimedDefinition returns the workflow of a claimed step and the
// definition the step runs.
func (e *Engine) claimedDefinition(ctx context.Context, c store.ClaimedStep) (*Workflow, *Step, error) {
	w, err := e.workflow(ctx, c.Namespace, c.Workflow, c.Version)
	if err != nil {
		return nil, nil, fmt.Errorf("weft: definition of %s/%s@%s: %w", c.Namespace, c.Workflow, c.Version, err)
	}
	def := w.stepDef(c.Step)
	if def == nil {
		return nil, nil, fmt.Errorf("weft: definition %s has no step %d (%q): %w", w.Ref(), c.Index, c.Name, store.ErrNotFound)
	}
	return w, def, nil
}

// Failure describes how an attempt run outside the engine failed.
type Failure struct {
	Message string
	// Permanent fails the step at once, without retrying.
	Permanent bool
	// RetryAfter asks for the next attempt after this delay instead of the
	// policy's backoff (the policy's max attempts still applies).
	RetryAfter time.Duration
}

// FailureOutcome returns the outcome to record for a failed attempt of a
// claimed step, under the step's retry policy exactly as for the engine's
// own handlers: a retry at the backoff's time, or a permanent failure when
// the failure says so or the attempts are used up.
func (e *Engine) FailureOutcome(ctx context.Context, c store.ClaimedStep, f Failure, engineID string) (store.Outcome, error) {
	_, def, err := e.claimedDefinition(ctx, c)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return store.Outcome{}, err
	}
	o := store.Outcome{Fence: c.Fence, EngineID: engineID}
	if def == nil {
		o.State, o.Error = state.StepFailed, f.Message
		return o, nil
	}
	var after *time.Duration
	if f.RetryAfter > 0 {
		after = &f.RetryAfter
	}
	failure(&o, def, c.Attempts, f.Message, f.Permanent, after)
	return o, nil
}

// CompletionOutcome returns the outcome that completes a claimed step with
// a JSON result ("" means null), exactly as for the engine's own handlers: a
// decision's or a batch's result makes its decision or its items, and a
// result that does not fit the step's type fails it for good.
func (e *Engine) CompletionOutcome(ctx context.Context, c store.ClaimedStep, result json.RawMessage, engineID string) (store.Outcome, error) {
	if len(result) == 0 {
		result = json.RawMessage(`null`)
	}
	if !json.Valid(result) {
		return store.Outcome{}, fmt.Errorf("%w result: not valid JSON", ErrInvalid)
	}
	w, def, err := e.claimedDefinition(ctx, c)
	if err != nil {
		return store.Outcome{}, err
	}
	o := store.Outcome{Fence: c.Fence, EngineID: engineID, State: state.StepCompleted, Result: result}
	completion(&o, w, def, o.Result)
	return o, nil
}

// Running reports whether the engine has started and is not stopping.
func (e *Engine) Running() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.started && !e.stopping
}
