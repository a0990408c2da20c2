package engine

// SHIM-REMOVE-AT-MERGE: today's store operations behind the signatures
// being added on h-store.

import (
	"context"
	"time"

	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

func (e *Engine) shimHeartbeat(ctx context.Context, p store.HeartbeatParams) (store.HeartbeatResult, error) {
	lost, err := e.store.Heartbeat(ctx, p.EngineID, p.Now, p.Held)
	return store.HeartbeatResult{Lost: lost}, err
}

func (e *Engine) shimHeldStep(ctx context.Context, engineID string, f store.Fence) (*store.ClaimedStep, error) {
	st, err := e.store.GetStep(ctx, f.StepID)
	if err != nil {
		return nil, err
	}
	if st.State != state.StepRunning || st.EngineID != engineID || st.Attempts != f.Attempt {
		return nil, store.ErrStaleLease
	}
	t, err := e.store.GetTask(ctx, st.TaskID)
	if err != nil {
		return nil, err
	}
	return &store.ClaimedStep{Step: *st, Fence: f, Workflow: t.Workflow, Version: t.Version}, nil
}

func (e *Engine) shimOverdue(ctx context.Context, now time.Time, limit int) ([]store.ClaimedStep, error) {
	return nil, nil
}
