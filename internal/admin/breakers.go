package admin

import (
	"context"
	"fmt"

	"github.com/weftrun/weft/store"
)

// This file holds the operator's side of circuit breakers: listing them
// and resetting one. Counting, holding and probing happen in the store,
// in the transactions that record outcomes and claim steps, so they hold
// for every engine and remote worker.

// ResetBreaker closes a breaker and forgets its count; an empty actor
// records the engine's id.
func (a *Admin) ResetBreaker(ctx context.Context, r store.BreakerReset) (store.Breaker, error) {
	if r.Actor == "" {
		r.Actor = a.id()
	}
	if err := r.Validate(); err != nil {
		return store.Breaker{}, err
	}
	b, err := a.store.ResetBreaker(ctx, r)
	if err != nil {
		return store.Breaker{}, fmt.Errorf("reset breaker %s: %w", r.Key, err)
	}
	a.log.Info("breaker reset", "breaker", r.Key, "actor", r.Actor)
	return b, nil
}

// Breakers returns the circuit breakers that failed since they were last
// reset.
func (a *Admin) Breakers(ctx context.Context) ([]store.Breaker, error) {
	bs, err := a.store.ListBreakers(ctx)
	if err != nil {
		return nil, fmt.Errorf("list breakers: %w", err)
	}
	return bs, nil
}
