package admin

import (
	"context"
	"fmt"
	"time"

	"github.com/weftrun/weft/internal/ident"

	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/workflow"
)

// This file holds the retentions operators set (the maintenance leader
// applies them: internal/maintenance), and the listings of engines and of
// the operator log.

// SetRetention sets (keep > 0) or clears (keep == 0) how long the finished
// tasks of a namespace in one state are kept, recorded in the operator log
// as actor's change.
func (a *Admin) SetRetention(ctx context.Context, namespace string, st state.Task, keep time.Duration, actor string) error {
	if !workflow.ValidName(namespace) {
		return fmt.Errorf("%w retention: namespace %q: use %s", store.ErrInvalid, namespace, ident.Rule)
	}
	switch st {
	case state.TaskCompleted, state.TaskFailed, state.TaskCancelled, state.TaskExpired:
	default:
		return fmt.Errorf("%w retention: %q is not a final task state (completed, failed, cancelled, expired)", store.ErrInvalid, st)
	}
	if err := workflow.CheckRetention(keep); err != nil {
		return store.Invalidf("keep."+string(st), "%v (0 clears it)", err)
	}
	if err := a.requireRetentionNamespace(ctx, namespace); err != nil {
		return err
	}
	if actor == "" {
		actor = a.id()
	}
	if err := a.store.SetRetention(ctx, store.Retention{Namespace: namespace, State: st, Keep: keep, UpdatedBy: actor}); err != nil {
		return fmt.Errorf("set retention: %w", err)
	}
	return nil
}

// Retentions lists the namespace retentions set.
func (a *Admin) Retentions(ctx context.Context) ([]store.Retention, error) {
	return a.store.Retentions(ctx)
}

// OperatorLog returns the newest entries of the operator log.
func (a *Admin) OperatorLog(ctx context.Context, limit int) ([]store.OperatorEntry, error) {
	return a.store.OperatorLog(ctx, limit)
}

// ListWorkers returns the live engines and remote workers with their
// handlers, held steps and last heartbeat.
func (a *Admin) ListWorkers(ctx context.Context) ([]store.EngineInfo, error) {
	return a.store.ListWorkers(ctx)
}

// StaleAfter is the engine's attention threshold for ready steps nobody
// serves.
func (a *Admin) StaleAfter() time.Duration { return a.staleAfter }
