package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/weftrun/weft/internal/sqlstore/sqldb"
	"github.com/weftrun/weft/internal/sqlstore/sqltx"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// This file holds the reads of tasks and steps that operators and clients
// make: tasks with their steps, lists, the audit log and queue counts.

// GetTask returns a task with its steps, the step of its parent that
// started it and its children: three reads, in one round trip where the
// database takes them so (ReadTogether).
func (s *reads) GetTask(ctx context.Context, id int64) (*store.Task, error) {
	var t store.Task
	found := false
	var steps []sqltx.StepRow
	var parentStep string
	var children []int64
	err := s.ReadTogether(ctx,
		sqltx.ARead{Query: `SELECT ` + sqltx.TaskColumns + `, COALESCE((SELECT s.name FROM steps s WHERE s.id = tasks.parent_step_id), '') FROM tasks WHERE id = ?`,
			Args: []any{id}, Read: func(rows sqldb.Rows) error {
				defer rows.Close()
				if rows.Next() {
					found = true
					var err error
					if t, err = sqltx.ScanTask(withDest{rows, []any{&parentStep}}); err != nil {
						return err
					}
				}
				return rows.Err()
			}},
		sqltx.ARead{Query: `SELECT ` + sqltx.StepColumns + ` FROM steps WHERE task_id = ? ORDER BY idx`, Args: []any{id}, Read: func(rows sqldb.Rows) (err error) {
			steps, err = sqldb.Collect(rows, sqltx.ScanStep)
			return err
		}},
		sqltx.ARead{Query: `SELECT id FROM tasks WHERE parent_task_id = ? ORDER BY id`, Args: []any{id}, Read: func(rows sqldb.Rows) (err error) {
			children, err = sqldb.Collect(rows, sqldb.Int64)
			return err
		}},
	)
	if err != nil {
		return nil, fmt.Errorf("get task %d: %w", id, err)
	}
	if !found {
		return nil, fmt.Errorf("task %d: %w", id, store.ErrNotFound)
	}
	t.ParentStep, t.Children = parentStep, children
	for _, st := range steps {
		t.Steps = append(t.Steps, st.Step)
	}
	for i, st := range steps {
		for _, j := range st.Deps {
			if j < len(t.Steps) {
				t.Steps[i].DependsOn = append(t.Steps[i].DependsOn, t.Steps[j].Name)
			}
		}
	}
	return &t, nil
}

// withDest is a row scanned into more destinations than its scanner
// gives: those, then dest.
type withDest struct {
	sqldb.Row
	dest []any
}

func (r withDest) Scan(dest ...any) error { return r.Row.Scan(append(dest, r.dest...)...) }

// ListTasks returns tasks newest first. With their attention reasons or
// active steps, it reads the tasks and their steps in one snapshot, so
// that a task's state and its steps agree.
func (s *reads) ListTasks(ctx context.Context, f store.TaskFilter) ([]store.Task, error) {
	if !f.Attention && !f.Active {
		return s.listTasks(ctx, s.Read, f)
	}
	var tasks []store.Task
	err := s.InSnapshot(ctx, func(read sqltx.Reader) (err error) {
		tasks, err = s.listTasks(ctx, read, f)
		return err
	})
	return tasks, err
}

func (s *reads) listTasks(ctx context.Context, read sqltx.Reader, f store.TaskFilter) ([]store.Task, error) {
	now := s.Clock().UnixMicro()
	q, args := s.listQuery(f, now)
	rows, err := read(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list tasks: %w", err)
	}
	tasks, err := sqldb.Collect(rows, sqltx.ScanTask)
	if err != nil {
		return nil, fmt.Errorf("list tasks: %w", err)
	}
	if f.Attention {
		if err := s.attentionReasons(ctx, read, tasks, f.StaleAfter, now); err != nil {
			return nil, err
		}
	}
	if f.Active {
		if err := s.activeSteps(ctx, read, tasks); err != nil {
			return nil, err
		}
	}
	return tasks, nil
}

// activeSteps fills each unfinished task's Active with its ready, running
// and waiting steps, in one read.
func (s *reads) activeSteps(ctx context.Context, read sqltx.Reader, tasks []store.Task) error {
	var ids []int64
	at := make(map[int64]int, len(tasks))
	for i, t := range tasks {
		if !t.State.Terminal() {
			ids = append(ids, t.ID)
			at[t.ID] = i
		}
	}
	if len(ids) == 0 {
		return nil
	}
	in, args := s.IDIn("task_id", ids)
	rows, err := read(ctx, `SELECT `+sqltx.StepColumns+` FROM steps WHERE `+in+` AND state IN ('ready', 'running', 'waiting') ORDER BY task_id, idx`, args...)
	if err != nil {
		return fmt.Errorf("active steps of %d tasks: %w", len(ids), err)
	}
	steps, err := sqldb.Collect(rows, sqltx.ScanStep)
	if err != nil {
		return fmt.Errorf("active steps of %d tasks: %w", len(ids), err)
	}
	for _, st := range steps {
		t := &tasks[at[st.TaskID]]
		t.Active = append(t.Active, st.Step)
	}
	return nil
}

// TaskStates returns the states of the tasks of ids that exist, by id.
func (s *reads) TaskStates(ctx context.Context, ids []int64) (map[int64]state.Task, error) {
	in, args := s.IDIn("id", ids)
	rows, err := s.Read(ctx, `SELECT id, state FROM tasks WHERE `+in, args...)
	if err != nil {
		return nil, fmt.Errorf("states of %d tasks: %w", len(ids), err)
	}
	out := make(map[int64]state.Task, len(ids))
	err = sqldb.Each(rows, func(r sqldb.Row) error {
		var id int64
		var st string
		if err := r.Scan(&id, &st); err != nil {
			return err
		}
		out[id] = state.Task(st)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("states of %d tasks: %w", len(ids), err)
	}
	return out, nil
}

// Audit returns a task's transitions, oldest first: its audit rows, then
// the claims of its steps' runs that no row records yet (the steps still
// running), with ID 0, in the order they were claimed. One statement reads
// both, so that a run that ends meanwhile is in one or the other.
func (s *reads) Audit(ctx context.Context, taskID int64) ([]store.AuditEntry, error) {
	rows, err := s.Read(ctx, `SELECT * FROM (SELECT `+sqltx.AuditColumns+` FROM audit WHERE task_id = ?
		UNION ALL SELECT `+sqltx.UnauditedClaims+` WHERE s.task_id = ? AND s.state = 'running' AND s.claim_audited = 0) AS a
		ORDER BY id = 0, id, at, step`, taskID, taskID)
	if err != nil {
		return nil, fmt.Errorf("audit of task %d: %w", taskID, err)
	}
	entries, err := sqltx.AuditEntries(rows)
	if err != nil {
		return nil, fmt.Errorf("audit of task %d: %w", taskID, err)
	}
	return entries, nil
}

// GetStep returns one step with its dependencies named.
func (s *reads) GetStep(ctx context.Context, id int64) (*store.Step, error) {
	st, err := sqltx.ScanStep(s.ReadRow(ctx, `SELECT `+sqltx.StepColumns+` FROM steps WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("step %d: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get step %d: %w", id, err)
	}
	if len(st.Deps) == 0 {
		return &st.Step, nil
	}
	rows, err := s.Read(ctx, `SELECT idx, name FROM steps WHERE task_id = ?`, st.TaskID)
	if err != nil {
		return nil, fmt.Errorf("name dependencies of step %d: %w", id, err)
	}
	type named struct {
		idx  int
		name string
	}
	all, err := sqldb.Collect(rows, func(r sqldb.Row) (named, error) {
		var n named
		err := r.Scan(&n.idx, &n.name)
		return n, err
	})
	if err != nil {
		return nil, fmt.Errorf("name dependencies of step %d: %w", id, err)
	}
	byIdx := make(map[int]string, len(all))
	for _, n := range all {
		byIdx[n.idx] = n.name
	}
	for _, d := range st.Deps {
		st.DependsOn = append(st.DependsOn, byIdx[d])
	}
	return &st.Step, nil
}

// QueueDepth counts unfinished steps by namespace and state.
func (s *reads) QueueDepth(ctx context.Context) ([]store.QueueCount, error) {
	rows, err := s.Read(ctx, `SELECT namespace, state, count(*) FROM steps
		WHERE state IN ('pending', 'ready', 'running', 'waiting') GROUP BY namespace, state ORDER BY namespace, state`)
	if err != nil {
		return nil, fmt.Errorf("queue depth: %w", err)
	}
	counts, err := sqldb.Collect(rows, sqltx.ScanQueueCount)
	if err != nil {
		return nil, fmt.Errorf("queue depth: %w", err)
	}
	return counts, nil
}

// CountUnfinishedTasks counts pending and running tasks up to limit.
func (s *reads) CountUnfinishedTasks(ctx context.Context, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	var n int
	err := s.ReadRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM tasks WHERE state IN ('pending', 'running') LIMIT ?) AS unfinished`, limit).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count unfinished tasks: %w", err)
	}
	return n, nil
}

// listQuery is the query of ListTasks.
func (s *reads) listQuery(f store.TaskFilter, now int64) (string, []any) {
	where, args := s.taskWhere(f, now)
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	q := `SELECT ` + sqltx.TaskColumns + ` FROM tasks`
	if where != "" {
		q += " WHERE " + where
	}
	return q + fmt.Sprintf(" ORDER BY id DESC LIMIT %d", limit), args
}

// ExplainListTasks returns the database's plan for the query of ListTasks,
// so tests can check that a filter by tag reads the task_tags index.
func (s *reads) ExplainListTasks(ctx context.Context, f store.TaskFilter) (string, error) {
	q, args := s.listQuery(f, s.Clock().UnixMicro())
	return s.explain(ctx, q, args...)
}
