package admin

import (
	"context"
	"fmt"

	"github.com/weftrun/weft/store"
)

// This file holds the operator's scheduling policies: the engine validates
// and audits a change and hands it to the store, where every claim (local
// or remote, on any engine) applies it.

// SetPolicy applies a policy change; an empty actor records the engine's id.
func (a *Admin) SetPolicy(ctx context.Context, c store.PolicyChange) (store.Policy, error) {
	if c.Actor == "" {
		c.Actor = a.id()
	}
	if err := c.Validate(); err != nil {
		return store.Policy{}, err
	}
	if err := a.requireTarget(ctx, c.Target); err != nil {
		return store.Policy{}, err
	}
	p, err := a.store.SetPolicy(ctx, c)
	if err != nil {
		return store.Policy{}, fmt.Errorf("set policy of %s: %w", c.Target, err)
	}
	a.log.Info("policy changed", "target", c.Target, "change", c.Describe(), "actor", c.Actor)
	return p, nil
}

// Policies returns the policies set and the usage of the limits in force.
func (a *Admin) Policies(ctx context.Context) (store.PolicyReport, error) {
	r, err := a.store.ListPolicies(ctx)
	if err != nil {
		return store.PolicyReport{}, fmt.Errorf("list policies: %w", err)
	}
	return r, nil
}

// PolicyChanges returns the latest policy changes, newest first.
func (a *Admin) PolicyChanges(ctx context.Context, limit int) ([]store.PolicyChangeRecord, error) {
	out, err := a.store.PolicyChanges(ctx, limit)
	if err != nil {
		return nil, fmt.Errorf("list policy changes: %w", err)
	}
	return out, nil
}
