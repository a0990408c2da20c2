package weft

import (
	"context"

	"github.com/weftrun/weft/store"
)

// Circuit breakers of steps (workflow.CircuitBreaker): after a number of
// consecutive failed attempts of one step of a workflow, across its tasks,
// its claims are held on every engine and remote worker until a cooldown
// passes; then one probe decides whether the breaker closes.
type (
	// Breaker is the state of one circuit breaker, keyed
	// "namespace/workflow/step".
	Breaker = store.Breaker
)

// The states of a breaker.
const (
	BreakerClosed   = store.BreakerClosed
	BreakerOpen     = store.BreakerOpen
	BreakerHalfOpen = store.BreakerHalfOpen
)

// Breakers returns the circuit breakers that failed since they were last
// reset, closed ones included (Policies lists them too).
func (e *Engine) Breakers(ctx context.Context) ([]Breaker, error) {
	return e.core.Admin().Breakers(ctx)
}

// ResetBreaker closes the breaker key ("namespace/workflow/step") and
// forgets its count: its held steps are claimed again at once. The reset is
// recorded in the policy changes with op's actor and reason. An unknown key
// is ErrNotFound.
func (e *Engine) ResetBreaker(ctx context.Context, key string, op Operator) (Breaker, error) {
	return e.core.Admin().ResetBreaker(ctx, store.BreakerReset{Key: key, Actor: op.Actor, Reason: op.Reason})
}
