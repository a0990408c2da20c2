package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/weftrun/weft/internal/sqlstore/sqldb"
	"github.com/weftrun/weft/internal/sqlstore/sqltx"
	"github.com/weftrun/weft/internal/sqlstore/transition"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// This file holds what becomes due with time: expiry of steps and tasks,
// promotion of waiting steps, running steps past their deadline, and the
// time of the next due event.

// Expire expires steps whose ttl passed and pending tasks whose good_until
// passed.
func (s *maintenance) Expire(ctx context.Context, now time.Time, engineID string) (int, error) {
	n := 0
	err := s.write(ctx, engineID, func(t *transition.Tx) error {
		t.Now = now.UnixMicro()
		tasks, err := t.Int64s(`SELECT id FROM tasks WHERE state = 'pending' AND good_until IS NOT NULL AND good_until <= ?`, t.Now)
		if err != nil {
			return err
		}
		for _, id := range tasks {
			if _, err := t.EndTask(id, state.TaskPending, state.TaskExpired, state.StepExpired, "good_until passed before the task started"); err != nil {
				return err
			}
			n++
		}
		rows, err := t.Query(`SELECT id, task_id, name, state, children FROM steps
			WHERE expires_at IS NOT NULL AND expires_at <= ? AND state IN ('ready', 'waiting')`, t.Now)
		if err != nil {
			return fmt.Errorf("find expired steps: %w", err)
		}
		type exp struct {
			id, task           int64
			name, st, children string
		}
		steps, err := sqldb.Collect(rows, func(r sqldb.Row) (exp, error) {
			var e exp
			err := r.Scan(&e.id, &e.task, &e.name, &e.st, &e.children)
			return e, err
		})
		if err != nil {
			return fmt.Errorf("find expired steps: %w", err)
		}
		for _, e := range steps {
			ok, err := t.MoveStep(e.id, e.task, e.name, state.Step(e.st), state.StepExpired, 0, "ttl passed before the step started",
				`finished_at = ?, expires_at = NULL`, t.Now)
			if err != nil {
				return err
			}
			if ok {
				if err := t.StepEnded(e.task, e.name, e.children, state.StepExpired, "ttl passed before the step started"); err != nil {
					return err
				}
				n++
			}
		}
		return nil
	})
	return n, err
}

// Promote makes waiting steps whose run_at came ready.
func (s *maintenance) Promote(ctx context.Context, now time.Time, engineID string) (int, error) {
	n := 0
	err := s.write(ctx, engineID, func(t *transition.Tx) error {
		t.Now = now.UnixMicro()
		timedOut, err := t.TimeOutWaits()
		if err != nil {
			return err
		}
		rows, err := t.Query(`UPDATE steps SET state = 'ready', sort_key = run_at - priority * ?, run_at = NULL
			WHERE state = 'waiting' AND run_at <= ? AND signal = '' RETURNING task_id, name, attempt`, t.H.Aging, t.Now)
		if err != nil {
			return fmt.Errorf("promote waiting steps: %w", err)
		}
		type woke struct {
			task    int64
			name    string
			attempt int
		}
		steps, err := sqldb.Collect(rows, func(r sqldb.Row) (woke, error) {
			var w woke
			err := r.Scan(&w.task, &w.name, &w.attempt)
			return w, err
		})
		if err != nil {
			return fmt.Errorf("promote waiting steps: %w", err)
		}
		for _, w := range steps {
			t.Audit(w.task, w.name, string(state.StepWaiting), string(state.StepReady), w.attempt, "run_at reached")
		}
		n = len(steps) + timedOut
		t.Readied += len(steps)
		return nil
	})
	return n, err
}

// NextWake returns the earliest time something becomes due.
func (s *maintenance) NextWake(ctx context.Context) (time.Time, bool, error) {
	var next sql.NullInt64
	err := s.ReadRow(ctx, `SELECT min(v) FROM (
		SELECT min(run_at) AS v FROM steps WHERE state = 'waiting'
		UNION ALL SELECT min(expires_at) FROM steps WHERE expires_at IS NOT NULL
		UNION ALL SELECT min(deadline) FROM steps WHERE state = 'running' AND deadline IS NOT NULL
		UNION ALL SELECT min(good_until) FROM tasks WHERE state = 'pending' AND good_until IS NOT NULL
		UNION ALL SELECT min(next_tick) FROM schedules WHERE paused = 0) AS due`).Scan(&next)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("next wake: %w", err)
	}
	if !next.Valid {
		return time.Time{}, false, nil
	}
	return time.UnixMicro(next.Int64), true, nil
}

// overdueQuery selects running steps past their deadline, earliest first,
// on the partial index steps_deadline.
var overdueQuery = sqltx.HeldStepSelect + ` WHERE s.state = 'running' AND s.deadline IS NOT NULL AND s.deadline < ? ORDER BY s.deadline LIMIT ?`

// OverdueSteps returns running steps whose deadline passed before now.
func (s *maintenance) OverdueSteps(ctx context.Context, now time.Time, limit int) ([]store.ClaimedStep, error) {
	if limit <= 0 {
		return nil, nil
	}
	rows, err := s.Read(ctx, overdueQuery, now.UnixMicro(), limit)
	if err != nil {
		return nil, fmt.Errorf("overdue steps: %w", err)
	}
	steps, err := sqldb.Collect(rows, sqltx.ScanHeldStep)
	if err != nil {
		return nil, fmt.Errorf("overdue steps: %w", err)
	}
	return steps, nil
}

// ExplainOverdue returns the database's plan for the query of
// OverdueSteps, so tests can check that it reads the deadline index rather
// than the steps table.
func (s *maintenance) ExplainOverdue(ctx context.Context, now time.Time, limit int) (string, error) {
	return s.explain(ctx, overdueQuery, now.UnixMicro(), max(limit, 1))
}
