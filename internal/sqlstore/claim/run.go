package claim

import (
	"context"
	"errors"
	"fmt"

	"github.com/weftrun/weft/store"
)

// Run runs fn in a write transaction: a claim's caller opens it (the
// store's handle, as engine p.EngineID) and commits it when fn returns nil.
type Run func(ctx context.Context, fn func(*ClaimTx) error) error

// Claim claims up to p.Limit ready steps: in one write transaction, again
// where the bounds a claim counted on were taken by claims elsewhere or
// its gate shut as it committed. What the claim leaves for the next (the
// limits met, their bounds, the rate tokens reserved) is kept once it
// commits.
func (pl *Planner) Claim(ctx context.Context, p store.ClaimParams, run Run) ([]store.ClaimedStep, error) {
	if p.Limit <= 0 {
		return nil, nil
	}
	var c claimRun
	var err error
	for range boundAttempts {
		var miss *boundMiss
		err = run(ctx, func(t *ClaimTx) error { return c.claim(t, p) })
		if errors.Is(err, errClaimAgain) {
			// Again, in a transaction of its own that stays open
			// whatever other claims of this handle found.
			c.keepOpen = true
			continue
		}
		if !errors.As(err, &miss) {
			break
		}
		// Claims elsewhere took room the bounds counted on: count.
		pl.bounds.forget(miss.namespaces)
	}
	switch {
	case errors.Is(err, errBoundMissed):
		return nil, nil // the next claim counts
	case err != nil:
		return nil, err
	}
	pl.backlog.Store(len(c.claimed) == p.Limit)
	pl.bounds.saw(c.totals)
	for _, n := range c.granted {
		pl.reserves.add(n.key, n.rate, n.granted, c.now)
	}
	reportDeferred(p, c.deferred)
	if c.held && p.Held != nil {
		p.Held()
	}
	return c.claimed, nil
}

// claimRun is one Claim: what its last transaction claimed and what it
// leaves the planner once that commits.
type claimRun struct {
	claimed  []store.ClaimedStep
	deferred map[string]*store.RateDeferral
	granted  []*bucketNeed // reserved tokens, held once the claim commits
	now      int64
	totals   map[string]limitTotals // of limits, as the claim left them
	held     bool
	keepOpen bool // a claim sent with its COMMIT found its gate shut: not again
}

// claim is the claim in one transaction.
func (c *claimRun) claim(t *ClaimTx, p store.ClaimParams) error {
	pl := t.Plan
	c.claimed, c.held = nil, false
	if !p.Now.IsZero() {
		t.Now = p.Now.UnixMicro()
	}
	if !pl.Dialect.WithWrites() && pl.backlog.Load() {
		// Under a backlog, SQLite claims in one statement where the claim
		// needs no check of its own (claimGated). Where that claims
		// nothing (no step was ready, or its gate shut), the claim runs
		// as below.
		got, err := t.claimGated(p, true)
		if err != nil || len(got) > 0 {
			c.claimed = got
			return err
		}
	}
	// The namespaces the last claim met limits in: bounded from the
	// handle's anchors, or locked and counted by the first statement.
	cached := pl.cachedPolicies()
	bounded := int64(-1)
	if cached != nil {
		bounded = cached.Version
	}
	bounds, predicted := pl.splitBounds(pl.predictedLimits(), bounded, t.Now, p.Limit, p.Caps, nil)
	leaseID := leaseOf(p)
	if err := t.candidatesAhead(p, cached, leaseID, bounds, len(predicted) > 0, c.keepOpen); err != nil {
		return err
	}
	version, room := bounded, []countRow(nil)
	if t.ahead == nil || !t.ahead.alone {
		var err error
		if version, room, err = t.claimStart(p, predicted, cached); err != nil {
			return err
		}
	}
	if version != bounded {
		if err := t.dropAhead(); err != nil {
			return err
		}
		// Bounds and counts made under other policies: the namespaces
		// counted stay locked, and all are bounded or counted again when
		// the claim meets them.
		bounds, predicted, room = nil, nil, nil
	}
	var keys *KeyRoom
	var rates *rateClaim
	var deps [][]int
	for attempt := 0; ; attempt++ {
		pol, err := t.policies(version)
		if err != nil {
			return err
		}
		if pol.All {
			return nil // everything is paused
		}
		keys = newKeyRoom(pol, p.Caps, p.Limit)
		if attempt == 0 {
			t.limitsIn(predicted, room, keys)
			t.boundedIn(bounds, keys)
		}
		keys.breakers = newBreakerRoom(pol, t.Now)
		rates = &rateClaim{}
		err = t.claimRounds(p, pol, keys, rates, leaseID, &c.claimed, &deps, &c.held)
		if !errors.Is(err, errPoliciesMoved) || len(c.claimed) > 0 || attempt == 2 {
			if errors.Is(err, errPoliciesMoved) {
				err = nil // a later round: what was claimed stands
			}
			if err != nil {
				return err
			}
			break
		}
		// Nothing claimed yet: read the policies as they are now.
		if err := t.QueryRow(`SELECT ` + PolicyVersion).Scan(&version); err != nil {
			return fmt.Errorf("read the policy version: %w", err)
		}
	}
	if !t.boundsChecked {
		if err := t.checkBounds(keys); err != nil {
			return err
		}
	}
	c.deferred, c.granted, c.now, c.totals = rates.deferred, rates.granted, t.Now, t.limitTotals
	pl.predictLimits(keys.met)
	pl.bounds.met(keys.floor)
	return t.claimContext(c.claimed, deps)
}

// Peek returns the step a claim with p would take first, or nil, taking
// nothing: no token, no probe, no wait for a limit's lock.
func (pl *Planner) Peek(ctx context.Context, p store.ClaimParams, run Run) (*store.Step, error) {
	var out *store.Step
	err := run(ctx, func(t *ClaimTx) error {
		var version int64
		if err := t.QueryRow(`SELECT ` + PolicyVersion).Scan(&version); err != nil {
			return fmt.Errorf("peek claim: %w", err)
		}
		pol, err := t.policies(version)
		if err != nil {
			return err
		}
		if pol.All {
			return nil
		}
		keys := newKeyRoom(pol, p.Caps, 1)
		// Open breakers hold their steps from a peek too; one that may
		// probe offers one step, and the peek takes no probe.
		if keys.breakers = newBreakerRoom(pol, t.Now); keys.breakers != nil {
			keys.breakers.peek = true
		}
		for round := range maxRounds {
			// round+1: a peek never waits for the locks of a limit; one
			// held by a claim under way counts as full.
			// No rate claim: a peek takes no token and defers nothing.
			ids, more, err := t.candidates(1, p, pol, keys, nil, round+1)
			if errors.Is(err, errPoliciesMoved) {
				return nil // the next peek reads them again
			}
			if err != nil {
				return fmt.Errorf("peek claim: %w", err)
			}
			if len(ids) > 0 {
				st := store.Step{ID: ids[0]}
				err := t.QueryRow(`SELECT task_id, name, namespace, handler, priority FROM steps WHERE id = ?`, ids[0]).
					Scan(&st.TaskID, &st.Name, &st.Namespace, &st.Handler, &st.Priority)
				if err != nil {
					return fmt.Errorf("peek claim: read step %d: %w", ids[0], err)
				}
				out = &st
				return nil
			}
			if !more {
				return nil
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
