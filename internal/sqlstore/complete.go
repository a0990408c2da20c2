package sqlstore

import (
	"context"

	"github.com/weftrun/weft/internal/sqlstore/claim"
	"github.com/weftrun/weft/internal/sqlstore/sqldb"
	"github.com/weftrun/weft/internal/sqlstore/transition"
	"github.com/weftrun/weft/store"
)

// This file holds the Store's operations that record outcomes, each in one
// write transaction (transition/complete.go records them).

// CompleteSteps records outcomes in one transaction.
func (s *lifecycle) CompleteSteps(ctx context.Context, outcomes []store.Outcome) ([]error, error) {
	var results []error
	err := s.workWrite(ctx, sqldb.Outcomes, transition.EngineOf(outcomes), func(t *transition.Tx) (err error) {
		results, err = t.Record(outcomes)
		return err
	})
	if err != nil {
		return nil, err
	}
	return results, nil
}

// CompleteAndClaim records outcomes as CompleteSteps does and, where they
// made steps ready, claims up to p.Limit ready steps in the same
// transaction, as ClaimSteps would, if the claim needs no check of its own
// (claim.ClaimTx.ClaimMadeReady): an engine whose handlers' outcomes make
// their steps' children ready runs the children without a transaction of
// their own.
// claimed is empty where it claimed nothing.
func (s *lifecycle) CompleteAndClaim(ctx context.Context, outcomes []store.Outcome, p store.ClaimParams) (results []error, claimed []store.ClaimedStep, err error) {
	err = s.workWrite(ctx, sqldb.Outcomes, transition.EngineOf(outcomes), func(t *transition.Tx) error {
		claimed, t.TrackReady = nil, true
		var err error
		if results, err = t.Record(outcomes); err != nil {
			return err
		}
		if claimed, err = t.Claimer().ClaimMadeReady(p); err != nil {
			return err
		}
		// The engines are woken for the steps made ready that the claim
		// did not take.
		readied := make(map[int64]bool, len(t.ReadyIDs))
		for _, id := range t.ReadyIDs {
			readied[id] = true
		}
		t.TookReady = claim.CountTaken(claimed, func(c store.ClaimedStep) bool { return readied[c.ID] })
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return results, claimed, nil
}
