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
// retry policy and timeout) from its workflow version.
func (e *Engine) StepDefinition(ctx context.Context, c store.ClaimedStep) (*Step, error) {
	w, err := e.workflow(ctx, c.Namespace, c.Workflow, c.Version)
	if err != nil {
		return nil, fmt.Errorf("weft: definition of %s/%s@%s: %w", c.Namespace, c.Workflow, c.Version, err)
	}
	if c.Index < 0 || c.Index >= len(w.Steps) {
		return nil, fmt.Errorf("weft: definition %s has no step %d", w.Ref(), c.Index)
	}
	s := w.Steps[c.Index]
	return &s, nil
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
	def, err := e.StepDefinition(ctx, c)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return store.Outcome{}, err
	}
	o := store.Outcome{Fence: c.Fence, EngineID: engineID, Error: f.Message}
	if def == nil {
		o.State = state.StepFailed
		return o, nil
	}
	policy := def.Retry.resolve()
	now := time.Now()
	switch {
	case f.Permanent:
		o.State = state.StepFailed
	case policy.Exhausted(c.Attempts):
		o.State, o.Error = state.StepFailed, fmt.Sprintf("%s (attempt %d of %d)", f.Message, c.Attempts, policy.MaxAttempts)
	case f.RetryAfter > 0:
		o.State, o.RunAt = state.StepWaiting, now.Add(f.RetryAfter)
	default:
		o.State, o.RunAt = state.StepWaiting, now.Add(policy.Delay(c.Attempts, randFloat))
	}
	if o.State == state.StepWaiting {
		o.Reason = "retry scheduled: " + o.Error
	}
	return o, nil
}

// ResultOutcome returns the outcome that completes a claimed step with a
// JSON result.
func ResultOutcome(c store.ClaimedStep, result json.RawMessage, engineID string) (store.Outcome, error) {
	if len(result) == 0 {
		result = json.RawMessage(`null`)
	}
	if !json.Valid(result) {
		return store.Outcome{}, fmt.Errorf("%w result: not valid JSON", ErrInvalid)
	}
	return store.Outcome{Fence: c.Fence, EngineID: engineID, State: state.StepCompleted, Result: result}, nil
}

// Running reports whether the engine has started and is not stopping.
func (e *Engine) Running() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.started && !e.stopping
}
