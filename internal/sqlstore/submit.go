package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// This file holds the submission of tasks: one transaction for any number
// of tasks, in the store's own transaction or in the caller's.

// The statements that submit a task. A key that exists in the namespace
// inserts nothing (also when a concurrent transaction holds it): the
// existing task is returned.
const (
	insertTask = `INSERT INTO tasks (namespace, workflow, version, state, input, priority, idempotency_key, run_at, good_until, created_at, remaining, limit_key, limit_n, tags, traceparent)
		VALUES (?, ?, ?, 'pending', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (namespace, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING RETURNING id`
)

// stepsPerInsert bounds the rows of one statement of insertStepRows: 64
// rows of 31 values stay far below SQLite's 32,766 parameters.
const stepsPerInsert = 64

// insertStepRows returns the statement that inserts n steps' rows
// (newStepRow, one after another): one statement for a task's steps
// rather than one a step, which cost SQLite's writer a statement's
// overhead a step.
func insertStepRows(n int) string {
	if n < len(smallStepInserts) {
		return smallStepInserts[n]
	}
	return stepRowsInsert(n)
}

// smallStepInserts are the statements of insertStepRows for tasks of few
// steps, the most common, built once.
var smallStepInserts = func() (q [17]string) {
	for n := 1; n < len(q); n++ {
		q[n] = stepRowsInsert(n)
	}
	return q
}()

func stepRowsInsert(n int) string {
	row := `(` + placeholders(len(stepInsertColumns)) + `)`
	return `INSERT INTO steps (` + strings.Join(stepInsertColumns, ", ") + `) VALUES ` + strings.TrimSuffix(strings.Repeat(row+", ", n), ", ")
}

// InsertTasks submits tasks in one transaction.
func (s *Store) InsertTasks(ctx context.Context, tasks []store.TaskInsert) ([]store.InsertResult, error) {
	var out []store.InsertResult
	err := s.write(ctx, "", func(t *txn) (err error) {
		out, err = t.insertTasks(tasks)
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
func (s *Store) InsertAndClaim(ctx context.Context, tasks []store.TaskInsert, p store.ClaimParams) (out []store.InsertResult, claimed []store.ClaimedStep, err error) {
	err = s.write(ctx, "", func(t *txn) error {
		claimed = nil
		var err error
		if out, err = t.insertTasks(tasks); err != nil {
			return err
		}
		if claimed, err = t.claimMadeReady(p); err != nil {
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
		t.tookReady = countTaken(claimed, func(c store.ClaimedStep) bool { return inserted[c.TaskID] })
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return out, claimed, nil
}

// InsertTasksIn submits tasks inside a transaction the caller began, so that
// they exist only if the caller commits it.
func (s *Store) InsertTasksIn(ctx context.Context, q Querier, tasks []store.TaskInsert) ([]store.InsertResult, error) {
	var out []store.InsertResult
	err := s.within(ctx, q, func(t *txn) (err error) {
		out, err = t.insertTasks(tasks)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// InsertTasksSQLTx submits tasks inside the caller's database/sql
// transaction.
func (s *Store) InsertTasksSQLTx(ctx context.Context, tx *sql.Tx, tasks []store.TaskInsert) ([]store.InsertResult, error) {
	return s.InsertTasksIn(ctx, &SQLQuerier{Tx: tx}, tasks)
}

// insertTasks writes tasks in input order. Where the database takes arrays,
// the tasks are written in bulk, a constant number of statements whatever
// their count (submitbulk.go), except that a task with Supersede takes the
// path of one task in its turn; elsewhere every task takes that path.
func (t *txn) insertTasks(tasks []store.TaskInsert) ([]store.InsertResult, error) {
	for i, in := range tasks {
		if err := validateInsert(in); err != nil {
			if len(tasks) > 1 {
				return nil, fmt.Errorf("task %d of %d: %w", i+1, len(tasks), err)
			}
			return nil, err
		}
	}
	out := make([]store.InsertResult, len(tasks))
	tpl := templates{}
	if !t.s.d.Arrays {
		for i, in := range tasks {
			r, err := t.insertOne(tpl, in, i, len(tasks))
			if err != nil {
				return nil, err
			}
			out[i] = r
		}
		return out, nil
	}
	// A task with Supersede may take a key from a task before it in the
	// same call: the tasks before it are written first.
	start := 0
	for i, in := range tasks {
		if !in.Supersede {
			continue
		}
		if err := t.insertBulk(tpl, tasks[start:i], out[start:i]); err != nil {
			return nil, err
		}
		r, err := t.insertOne(tpl, in, i, len(tasks))
		if err != nil {
			return nil, err
		}
		out[i], start = r, i+1
	}
	if err := t.insertBulk(tpl, tasks[start:], out[start:]); err != nil {
		return nil, err
	}
	return out, nil
}

// validateInsert checks one task to insert.
func validateInsert(in store.TaskInsert) error {
	if err := store.ValidateInsert(in); err != nil {
		return err
	}
	return store.ValidateTags(in.Tags)
}

// insertOne writes task i of n with one statement for the task and one per
// step; a key that exists returns the task holding it, or with Supersede
// is taken from it.
func (t *txn) insertOne(tpl templates, in store.TaskInsert, i, n int) (store.InsertResult, error) {
	nt := t.newTask(in)
	var id int64
	insert := func() error {
		return t.queryRow(insertTask, in.Namespace, in.Workflow, in.Version, string(nt.input), in.Priority, nt.key, nt.runAt, nt.goodUntil, t.now,
			len(in.Steps), in.LimitKey, in.Limit, nt.tags, in.TraceParent).Scan(&id)
	}
	err := insert()
	var superseded *heldKey
	if errors.Is(err, sql.ErrNoRows) && in.Supersede {
		// The task holding the key gives it up; this one takes it.
		if superseded, err = t.releaseKey(in.Namespace, in.IdempotencyKey); err != nil {
			return store.InsertResult{}, err
		}
		err = insert()
	}
	if errors.Is(err, sql.ErrNoRows) {
		existing, err := scanTask(t.queryRow(`SELECT `+taskColumns+` FROM tasks WHERE namespace = ? AND idempotency_key = ?`, in.Namespace, in.IdempotencyKey))
		if err != nil {
			return store.InsertResult{}, fmt.Errorf("look up idempotency key %q: %w", in.IdempotencyKey, err)
		}
		return store.InsertResult{Task: existing, Duplicate: true}, nil
	}
	if err != nil {
		return store.InsertResult{}, fmt.Errorf("insert task %d of %d: %w", i+1, n, err)
	}
	t.audit(id, "", "", string(state.TaskPending), 0, "submitted")
	if err := t.insertTags(id, in.Tags); err != nil {
		return store.InsertResult{}, err
	}
	// The task's steps go in statements of up to stepsPerInsert rows.
	// One buffer of arguments for the steps of every task of the write:
	// each statement is done with it when exec returns.
	rows := slices.Grow(t.stepArgs[:0], min(len(in.Steps), stepsPerInsert)*len(stepInsertColumns))
	defer func() { t.stepArgs = rows[:0] }()
	pending := 0
	flush := func() error {
		if pending == 0 {
			return nil
		}
		if _, err := t.exec(insertStepRows(pending), rows...); err != nil {
			return fmt.Errorf("insert the steps of task %d: %w", id, err)
		}
		rows, pending = rows[:0], 0
		return nil
	}
	for j, tp := range tpl.of(in.Steps) {
		st := t.start(&tp, in.Priority, nt.runAt)
		rows = appendStepRow(rows, id, j, &tp, in, st)
		pending++
		t.audit(id, tp.name, "", string(st.state), 0, "submitted")
		if pending == stepsPerInsert {
			if err := flush(); err != nil {
				return store.InsertResult{}, err
			}
		}
	}
	if err := flush(); err != nil {
		return store.InsertResult{}, err
	}
	out := store.InsertResult{Task: nt.task(in, id, t.now)}
	if superseded != nil {
		if err := t.supersede(*superseded, id, in.IdempotencyKey); err != nil {
			return store.InsertResult{}, err
		}
		out.Superseded = superseded.id
	}
	return out, nil
}
