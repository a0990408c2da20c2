package sqlstore

import (
	"context"
	"database/sql"

	"github.com/weftrun/weft/internal/sqlstore/claim"
	"github.com/weftrun/weft/internal/sqlstore/sqldb"
	"github.com/weftrun/weft/internal/sqlstore/transition"
	"github.com/weftrun/weft/store"
)

// This file holds the submission of tasks: one transaction for any number
// of tasks, in the store's own transaction or in the caller's
// (transition/submit.go writes them).

// InsertTasks submits tasks in one transaction.
func (s *lifecycle) InsertTasks(ctx context.Context, tasks []store.TaskInsert) ([]store.InsertResult, error) {
	var out []store.InsertResult
	err := s.writeRetry(ctx, "", func(t *transition.Tx) (err error) {
		out, err = t.InsertTasks(tasks)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// InsertAndClaim submits tasks as InsertTasks does and, where they start
// with steps ready, claims up to p.Limit ready steps in the same
// transaction, as CompleteAndClaim does for the steps outcomes make ready.
// claimed is empty where it claimed nothing.
func (s *lifecycle) InsertAndClaim(ctx context.Context, tasks []store.TaskInsert, p store.ClaimParams) (out []store.InsertResult, claimed []store.ClaimedStep, err error) {
	err = s.workWriteRetry(ctx, sqldb.Claims, "", func(t *transition.Tx) error {
		claimed = nil
		var err error
		if out, err = t.InsertTasks(tasks); err != nil {
			return err
		}
		if claimed, err = t.Claimer().ClaimMadeReady(p); err != nil {
			return err
		}
		// The steps made ready are the new tasks' first: those of theirs
		// the claim took need no engine woken.
		inserted := make(map[int64]bool, len(out))
		for _, r := range out {
			if !r.Duplicate {
				inserted[r.Task.ID] = true
			}
		}
		t.TookReady = claim.CountTaken(claimed, func(c store.ClaimedStep) bool { return inserted[c.TaskID] })
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return out, claimed, nil
}

// InsertTasksIn submits tasks inside a transaction the caller began, so that
// they exist only if the caller commits it.
func (s *lifecycle) InsertTasksIn(ctx context.Context, q sqldb.Querier, tasks []store.TaskInsert) ([]store.InsertResult, error) {
	var out []store.InsertResult
	err := s.within(ctx, q, func(t *transition.Tx) (err error) {
		out, err = t.InsertTasks(tasks)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// InsertTasksSQLTx submits tasks inside the caller's database/sql
// transaction.
func (s *lifecycle) InsertTasksSQLTx(ctx context.Context, tx *sql.Tx, tasks []store.TaskInsert) ([]store.InsertResult, error) {
	return s.InsertTasksIn(ctx, &sqldb.SQLQuerier{Tx: tx}, tasks)
}
