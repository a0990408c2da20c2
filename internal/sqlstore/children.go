package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/weftrun/weft/internal/sqlstore/sqltx"
	"github.com/weftrun/weft/internal/sqlstore/transition"
	"github.com/weftrun/weft/store"
)

// This file holds the Store's operations on sub-workflows: a Go handler's
// StartChild and a finished child's result (transition/children.go holds
// the links between parent and child).

// StartChild starts a child task from a running step.
func (s *lifecycle) StartChild(ctx context.Context, f store.Fence, c store.ChildStart) (store.InsertResult, error) {
	var out store.InsertResult
	err := s.write(ctx, "", func(t *transition.Tx) error {
		var n int
		if err := t.QueryRow(`SELECT count(*) FROM steps WHERE id = ? AND state = 'running' AND attempt = ? AND lease_id = ?`,
			f.StepID, f.Attempt, f.LeaseID).Scan(&n); err != nil {
			return fmt.Errorf("check step %d: %w", f.StepID, err)
		}
		if n == 0 {
			return fmt.Errorf("start a child from step %d attempt %d: %w", f.StepID, f.Attempt, store.ErrStaleLease)
		}
		if key := c.Task.IdempotencyKey; key != "" {
			existing, err := sqltx.ScanTask(t.QueryRow(`SELECT `+sqltx.TaskColumns+` FROM tasks WHERE namespace = ? AND idempotency_key = ?`, c.Task.Namespace, key))
			if err == nil {
				out = store.InsertResult{Task: existing, Duplicate: true}
				return nil
			}
			if !errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("look up idempotency key %q: %w", key, err)
			}
		}
		parent, depth, msg, err := t.ChildLimit(f.StepID, &c)
		if err != nil {
			return err
		}
		if msg != "" {
			return store.Conflictf("%s", msg)
		}
		out, err = t.InsertChild(parent, f.StepID, depth, c.Task)
		return err
	})
	return out, err
}

// TaskResult returns what a completed task hands to the step that started
// it (see taskResult).
func (s *lifecycle) TaskResult(ctx context.Context, id int64) (json.RawMessage, error) {
	rows, err := s.Read(ctx, transition.TaskResultQuery, id)
	return transition.DecodeTaskResult(id, rows, err)
}
