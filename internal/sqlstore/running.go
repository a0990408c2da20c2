package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/weftrun/weft/internal/sqlstore/sqltx"
	"github.com/weftrun/weft/internal/sqlstore/transition"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// This file holds what the holder of a running step reads and writes while
// the step runs, each guarded by the step's fence: the step itself,
// checkpoints, progress and the deferred sub-status.

// HeldStep returns the step running under engineID with exactly f's attempt
// and lease, read with its task's workflow and version in one query.
func (s *lifecycle) HeldStep(ctx context.Context, engineID string, f store.Fence) (*store.ClaimedStep, error) {
	c, err := sqltx.ScanHeldStep(s.ReadRow(ctx, sqltx.HeldStepSelect+` WHERE s.id = ?`, f.StepID))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("step %d: %w", f.StepID, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get step %d: %w", f.StepID, err)
	}
	if c.State != state.StepRunning || c.EngineID != engineID || c.Fence != f {
		// The message names the asker and its fence, never what the step
		// is now nor who holds it: the asker may be a remote worker of
		// another credential than the holder's, whose ids it must not
		// learn (they are answered as not found everywhere else).
		return nil, fmt.Errorf("step %d attempt %d lease %d of engine %s: %w",
			f.StepID, f.Attempt, f.LeaseID, engineID, store.ErrStaleLease)
	}
	return &c, nil
}

// SaveCheckpoint stores a running step's checkpoint.
func (s *lifecycle) SaveCheckpoint(ctx context.Context, f store.Fence, checkpoint json.RawMessage) error {
	return s.fenced(ctx, "", f, `checkpoint = ?`, string(checkpoint))
}

// SaveProgress records a running step's progress (fenced).
func (s *lifecycle) SaveProgress(ctx context.Context, f store.Fence, fraction float64, message string) error {
	if !(fraction >= 0 && fraction <= 1) {
		return fmt.Errorf("progress %v of step %d is not between 0 and 1", fraction, f.StepID)
	}
	return s.fenced(ctx, "", f, `progress = ?, progress_msg = ?`, fraction, message)
}

// SetDeferred sets or clears the deferred sub-status.
func (s *lifecycle) SetDeferred(ctx context.Context, f store.Fence, engineID string, deferred bool) error {
	sub := ""
	if deferred {
		sub = state.SubDeferred
	}
	return s.fenced(ctx, engineID, f, `sub = ?`, sub)
}

// fenced applies set to a step still running under exactly f, or reports
// ErrStaleLease.
func (s *lifecycle) fenced(ctx context.Context, engineID string, f store.Fence, set string, args ...any) error {
	return s.write(ctx, engineID, func(t *transition.Tx) error {
		res, err := t.Exec(`UPDATE steps SET `+set+` WHERE id = ? AND state = 'running' AND attempt = ? AND lease_id = ?`,
			append(args, f.StepID, f.Attempt, f.LeaseID)...)
		if err != nil {
			return fmt.Errorf("update step %d: %w", f.StepID, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("step %d attempt %d: %w", f.StepID, f.Attempt, store.ErrStaleLease)
		}
		return nil
	})
}
