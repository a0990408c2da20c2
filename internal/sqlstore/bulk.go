package sqlstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/weftrun/weft/internal/sqlstore/sqldb"
	"github.com/weftrun/weft/internal/sqlstore/sqltx"
	"github.com/weftrun/weft/internal/sqlstore/transition"
	"github.com/weftrun/weft/store"
)

// This file holds the actions on many tasks: counting and selecting them by
// filter, and cancelling, retrying and deleting them one batch (one
// transaction) at a time.

// CountTasks counts the tasks f selects.
func (s *admin) CountTasks(ctx context.Context, f store.TaskFilter) (int, error) {
	where, args := s.taskWhere(f, s.Clock().UnixMicro())
	q := `SELECT count(*) FROM tasks`
	if where != "" {
		q += " WHERE " + where
	}
	var n int
	if err := s.ReadRow(ctx, q, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("count tasks: %w", err)
	}
	return n, nil
}

// MatchTasks returns the ids of up to limit tasks f selects, newest first.
func (s *admin) MatchTasks(ctx context.Context, f store.TaskFilter, limit int) ([]int64, error) {
	if limit <= 0 {
		limit = 500
	}
	where, args := s.taskWhere(f, s.Clock().UnixMicro())
	q := `SELECT id FROM tasks`
	if where != "" {
		q += " WHERE " + where
	}
	q += fmt.Sprintf(" ORDER BY id DESC LIMIT %d", limit)
	rows, err := s.Read(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("match tasks: %w", err)
	}
	ids, err := sqldb.Collect(rows, sqldb.Int64)
	if err != nil {
		return nil, fmt.Errorf("match tasks: %w", err)
	}
	return ids, nil
}

// CancelTasks cancels the cancellable tasks among ids in one transaction.
func (s *admin) CancelTasks(ctx context.Context, ids []int64, engineID, reason string) (store.BatchResult, error) {
	if reason == "" {
		reason = "cancelled"
	}
	var res store.BatchResult
	err := s.writeRetry(ctx, engineID, func(t *transition.Tx) error {
		res = store.BatchResult{}
		if err := t.LockTasks(ids); err != nil {
			return err
		}
		for _, id := range ids {
			running, err := t.CancelTask(id, reason)
			switch {
			case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrConflict):
				res.Skipped++
			case err != nil:
				return err
			default:
				res.Done = append(res.Done, id)
				res.Running = append(res.Running, running...)
			}
		}
		return nil
	})
	if err != nil {
		return store.BatchResult{}, fmt.Errorf("cancel tasks: %w", err)
	}
	return res, nil
}

// RetryTasks retries the failed tasks among ids in one transaction.
func (s *admin) RetryTasks(ctx context.Context, ids []int64, engineID, reason string) (store.BatchResult, error) {
	taskReason, stepReason := "retried", "task retried"
	if reason != "" {
		taskReason, stepReason = reason, "task retried: "+reason
	}
	var res store.BatchResult
	err := s.writeRetry(ctx, engineID, func(t *transition.Tx) error {
		res = store.BatchResult{}
		if err := t.LockTasks(ids); err != nil {
			return err
		}
		for _, id := range ids {
			// A task gone or not failed is skipped: retryTask says so
			// before it writes anything.
			switch err := t.RetryTask(id, taskReason, stepReason); {
			case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrConflict):
				res.Skipped++
			case err != nil:
				return err
			default:
				res.Done = append(res.Done, id)
			}
		}
		return nil
	})
	if err != nil {
		return store.BatchResult{}, fmt.Errorf("retry tasks: %w", err)
	}
	return res, nil
}

// finishedStates are the states a task may be deleted in.
const finishedStates = `('completed', 'failed', 'cancelled', 'expired')`

// DeleteTasks deletes the finished tasks among p.IDs and everything that
// refers to them.
func (s *admin) DeleteTasks(ctx context.Context, p store.DeleteParams) (store.BatchResult, error) {
	if len(p.IDs) == 0 {
		return store.BatchResult{}, nil
	}
	var res store.BatchResult
	write := s.writeRetry
	if p.Archive != nil {
		// The archive has seen the batch once it is called: the
		// transaction is not run again behind its back.
		write = s.write
	}
	err := write(ctx, p.Actor, func(t *transition.Tx) error {
		res = store.BatchResult{}
		// The rows to delete are locked (PostgreSQL), so that a retry
		// cannot bring one back to life between the archive and the
		// delete.
		if err := t.LockTasks(p.IDs); err != nil {
			return err
		}
		in := make([]any, len(p.IDs))
		for i, id := range p.IDs {
			in[i] = id
		}
		ids, err := t.Int64s(`SELECT id FROM tasks WHERE id IN (`+sqltx.Placeholders(len(in))+`) AND state IN `+finishedStates+` ORDER BY id`, in...)
		if err != nil {
			return fmt.Errorf("select tasks to delete: %w", err)
		}
		res.Skipped = len(p.IDs) - len(ids)
		if len(ids) == 0 {
			return nil
		}
		del := make([]any, len(ids))
		for i, id := range ids {
			del[i] = id
		}
		if p.Archive != nil {
			archived, err := t.Archived(ids)
			if err != nil {
				return err
			}
			if err := p.Archive(archived); err != nil {
				return fmt.Errorf("archive: %w", err)
			}
		}
		list := sqltx.Placeholders(len(del))
		// Every table that refers to a task (see the migrations); of the
		// audit trail, retention's deletes leave what goes whole.
		audit := []string{"audit"}
		if p.Retention {
			audit = s.Dialect.ExpiredAudit()
		}
		for _, table := range append([]string{"steps", "signals", "task_tags"}, audit...) {
			if _, err := t.Exec(`DELETE FROM `+table+` WHERE task_id IN (`+list+`)`, del...); err != nil {
				return fmt.Errorf("delete %s of tasks: %w", table, err)
			}
		}
		if _, err := t.Exec(`DELETE FROM tasks WHERE id IN (`+list+`)`, del...); err != nil {
			return fmt.Errorf("delete tasks: %w", err)
		}
		if p.Log {
			for _, id := range ids {
				if err := t.LogOperator(p.Actor, "delete", fmt.Sprintf("task %d", id), p.Reason); err != nil {
					return err
				}
			}
		}
		res.Done = ids
		return nil
	})
	if err != nil {
		return store.BatchResult{}, fmt.Errorf("delete tasks: %w", err)
	}
	return res, nil
}

// FinishedTasks returns the ids of tasks in q.State finished before
// q.FinishedBefore, oldest finished first. It reads the finished tasks'
// index (tasks_activity) in the order they finished, checking each entry's
// state there; a state rare among them is read by the (state, id) index.
func (s *admin) FinishedTasks(ctx context.Context, q store.FinishedQuery) ([]int64, error) {
	limit := q.Limit
	if limit <= 0 {
		limit = 500
	}
	where := `state = ? AND finished_at IS NOT NULL AND finished_at < ?`
	args := []any{string(q.State), q.FinishedBefore.UnixMicro()}
	if q.Namespace != "" {
		where, args = where+` AND namespace = ?`, append(args, q.Namespace)
	}
	if q.Workflow != "" {
		where, args = where+` AND workflow = ?`, append(args, q.Workflow)
	}
	if len(q.ExceptWorkflows) > 0 {
		where += ` AND workflow NOT IN (` + sqltx.Placeholders(len(q.ExceptWorkflows)) + `)`
		for _, w := range q.ExceptWorkflows {
			args = append(args, w)
		}
	}
	rows, err := s.Read(ctx, fmt.Sprintf(`SELECT id FROM tasks WHERE %s ORDER BY finished_at LIMIT %d`, where, limit), args...)
	if err != nil {
		return nil, fmt.Errorf("finished tasks: %w", err)
	}
	ids, err := sqldb.Collect(rows, sqldb.Int64)
	if err != nil {
		return nil, fmt.Errorf("finished tasks: %w", err)
	}
	return ids, nil
}
