package transition

import (
	"fmt"

	"github.com/weftrun/weft/internal/sqlstore/sqldb"
	"github.com/weftrun/weft/internal/sqlstore/sqltx"
	"github.com/weftrun/weft/store"
)

// This file holds what a bulk action writes for one batch: locking its
// tasks in id order, and archiving finished tasks before they are deleted.

// LockTasks locks the rows of tasks ids and of all their steps, where
// several writers may change them (PostgreSQL): every step first, then the
// tasks, each in id order, the order claims and completions lock them in
// (steps before their task). Bulk actions that lock their batches this way
// cannot deadlock one another or the engines, and read the tasks' states
// as they are, not as they were before a concurrent action committed.
func (t *operatorTx) LockTasks(ids []int64) error {
	if t.H.Dialect.ClaimLock() == "" || len(ids) == 0 {
		return nil
	}
	steps, args := t.IDIn("task_id", ids)
	if _, err := t.Exec(`SELECT id FROM steps WHERE `+steps+` ORDER BY id FOR UPDATE`, args...); err != nil {
		return fmt.Errorf("lock the steps of %d tasks: %w", len(ids), err)
	}
	tasks, args := t.IDIn("id", ids)
	if _, err := t.Exec(`SELECT id FROM tasks WHERE `+tasks+` ORDER BY id FOR UPDATE`, args...); err != nil {
		return fmt.Errorf("lock %d tasks: %w", len(ids), err)
	}
	return nil
}

// Archived loads tasks with their steps and audit trails, in id order.
func (t *operatorTx) Archived(ids []int64) ([]store.ArchivedTask, error) {
	in := make([]any, len(ids))
	for i, id := range ids {
		in[i] = id
	}
	list := sqltx.Placeholders(len(in))
	rows, err := t.Query(`SELECT `+sqltx.TaskColumns+` FROM tasks WHERE id IN (`+list+`) ORDER BY id`, in...)
	if err != nil {
		return nil, fmt.Errorf("archive tasks: %w", err)
	}
	tasks, err := sqldb.Collect(rows, sqltx.ScanTask)
	if err != nil {
		return nil, fmt.Errorf("archive tasks: %w", err)
	}
	out := make([]store.ArchivedTask, len(tasks))
	at := make(map[int64]int, len(tasks))
	for i, task := range tasks {
		out[i].Task, at[task.ID] = task, i
	}
	if rows, err = t.Query(`SELECT `+sqltx.StepColumns+` FROM steps WHERE task_id IN (`+list+`) ORDER BY task_id, idx`, in...); err != nil {
		return nil, fmt.Errorf("archive steps: %w", err)
	}
	steps, err := sqldb.Collect(rows, sqltx.ScanStep)
	if err != nil {
		return nil, fmt.Errorf("archive steps: %w", err)
	}
	for _, st := range steps {
		task := &out[at[st.TaskID]].Task
		task.Steps = append(task.Steps, st.Step)
	}
	if rows, err = t.Query(`SELECT `+sqltx.AuditColumns+` FROM audit WHERE task_id IN (`+list+`) ORDER BY task_id, id`, in...); err != nil {
		return nil, fmt.Errorf("archive audit: %w", err)
	}
	trail, err := sqltx.AuditEntries(rows)
	if err != nil {
		return nil, fmt.Errorf("archive audit: %w", err)
	}
	for _, e := range trail {
		a := &out[at[e.TaskID]]
		a.Audit = append(a.Audit, e)
	}
	return out, nil
}
