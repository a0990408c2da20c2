package engine

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/workflow"
)

// This file holds the engine's registration (the handlers it advertises),
// the retentions operators set, and the listings of engines and the
// operator log. The maintenance leader applies the retentions
// (internal/maintenance).

// engineInfo is this engine's registration, with the handlers it serves.
func (x *executor) engineInfo(id string) store.EngineInfo {
	x.mu.Lock()
	names := x.names
	x.namesChanged = false
	x.mu.Unlock()
	return store.EngineInfo{ID: id, Host: x.e.host, PID: os.Getpid(), StartedAt: time.Now(), Handlers: advertised(names)}
}

// advertised is what an engine serving names advertises: "*" when it
// claims any handler (no names registered restricts nothing).
func advertised(names []string) []string {
	if len(names) == 0 {
		return []string{"*"}
	}
	return names
}

// advertise records the handlers registered since the engine last
// advertised them.
func (x *executor) advertise(ctx context.Context, id string) {
	x.mu.Lock()
	changed, names := x.namesChanged, x.names
	x.namesChanged = false
	x.mu.Unlock()
	if !changed {
		return
	}
	if err := x.e.store.SetHandlers(ctx, id, advertised(names)); err != nil {
		x.mu.Lock()
		x.namesChanged = true // try again at the next heartbeat
		x.mu.Unlock()
		x.e.log.Warn("advertise handlers", "engine_id", id, "error", err)
	}
}

// SetRetention sets (keep > 0) or clears (keep == 0) how long the finished
// tasks of a namespace in one state are kept, recorded in the operator log
// as actor's change.
func (e *Engine) SetRetention(ctx context.Context, namespace string, st state.Task, keep time.Duration, actor string) error {
	if !workflow.ValidName(namespace) {
		return fmt.Errorf("%w retention: namespace %q: use letters, digits, '_', '.' and '-'", store.ErrInvalid, namespace)
	}
	switch st {
	case state.TaskCompleted, state.TaskFailed, state.TaskCancelled, state.TaskExpired:
	default:
		return fmt.Errorf("%w retention: %q is not a final task state (completed, failed, cancelled, expired)", store.ErrInvalid, st)
	}
	if keep < 0 {
		return fmt.Errorf("%w retention: a duration cannot be negative", store.ErrInvalid)
	}
	if err := e.requireRetentionNamespace(ctx, namespace); err != nil {
		return err
	}
	if actor == "" {
		actor = e.ID()
	}
	if err := e.store.SetRetention(ctx, store.Retention{Namespace: namespace, State: st, Keep: keep, UpdatedBy: actor}); err != nil {
		return fmt.Errorf("weft: set retention: %w", err)
	}
	return nil
}

// Retentions lists the namespace retentions set.
func (e *Engine) Retentions(ctx context.Context) ([]store.Retention, error) {
	return e.store.Retentions(ctx)
}

// OperatorLog returns the newest entries of the operator log.
func (e *Engine) OperatorLog(ctx context.Context, limit int) ([]store.OperatorEntry, error) {
	return e.store.OperatorLog(ctx, limit)
}

// ListWorkers returns the live engines and remote workers with their
// handlers, held steps and last heartbeat.
func (e *Engine) ListWorkers(ctx context.Context) ([]store.EngineInfo, error) {
	return e.store.ListWorkers(ctx)
}

// StaleAfter is the engine's attention threshold for ready steps nobody
// serves.
func (e *Engine) StaleAfter() time.Duration { return e.cfg.StaleAfter }
