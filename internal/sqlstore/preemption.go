package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/weftrun/weft/internal/sqlstore/sqldb"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// This file holds the peek of preemption: which step a claim would take
// first, found by the claim's own query and policies, without marking it.
// An engine asks only while every slot is busy and a preemptible step of
// its runs, so a claim path with no preemptible step never runs it.

// PeekClaim returns the step a claim with p would take first, or nil.
func (s *claims) PeekClaim(ctx context.Context, p store.ClaimParams) (*store.Step, error) {
	var out *store.Step
	err := s.write(ctx, p.EngineID, func(tx *txn) error {
		t := tx.claimer()
		var version int64
		if err := t.QueryRow(`SELECT ` + policyVersion).Scan(&version); err != nil {
			return fmt.Errorf("peek claim: %w", err)
		}
		pol, err := t.policies(version)
		if err != nil {
			return err
		}
		if pol.all {
			return nil
		}
		keys := newKeyRoom(pol, p.Caps, 1)
		// Open breakers hold their steps from a peek too; one that may
		// probe offers one step, and the peek takes no probe.
		if keys.brk = newBreakerRoom(pol, t.Now); keys.brk != nil {
			keys.brk.peek = true
		}
		for round := range claimRounds {
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

// HeldPreemptible returns the preemptible steps among held that run under
// engineID with exactly those fences: their id, task, name, namespace,
// handler, priority, fence and workflow. A remote worker's heartbeat lists
// its steps; this is the one read that finds which of them may be
// preempted (by primary key, only for a worker that says it is full).
func (s *claims) HeldPreemptible(ctx context.Context, engineID string, held []store.Fence) ([]store.ClaimedStep, error) {
	if len(held) == 0 {
		return nil, nil
	}
	ids := make([]int64, len(held))
	for i, f := range held {
		ids[i] = f.StepID
	}
	in, inArgs := s.IDIn("s.id", ids)
	rows, err := s.Read(ctx, `SELECT s.id, s.task_id, s.name, s.namespace, s.handler, s.priority, s.attempt, s.lease_id, t.workflow
		FROM steps s JOIN tasks t ON t.id = s.task_id
		WHERE s.engine_id = ? AND s.state = 'running' AND s.preemptible <> 0 AND `+in, append([]any{engineID}, inArgs...)...)
	if err != nil {
		return nil, fmt.Errorf("preemptible steps of %s: %w", engineID, err)
	}
	steps, err := sqldb.Collect(rows, func(r sqldb.Row) (store.ClaimedStep, error) {
		var c store.ClaimedStep
		err := r.Scan(&c.ID, &c.TaskID, &c.Name, &c.Namespace, &c.Handler, &c.Priority, &c.Attempts, &c.Fence.LeaseID, &c.Workflow)
		c.Fence.StepID, c.Fence.Attempt, c.Preemptible, c.State = c.ID, c.Attempts, true, state.StepRunning
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("preemptible steps of %s: %w", engineID, err)
	}
	return slices.DeleteFunc(steps, func(c store.ClaimedStep) bool { return !slices.Contains(held, c.Fence) }), nil
}
