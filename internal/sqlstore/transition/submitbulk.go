package transition

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/weftrun/weft/internal/sqlstore/sqldb"
	"github.com/weftrun/weft/internal/sqlstore/sqltx"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// This file writes many tasks in bulk where the database takes arrays, with
// statements that do not grow with the number of tasks: for the tasks, one
// INSERT of arrays (or, without keys, one statement for their ids and a
// COPY), then one COPY or INSERT for all their steps, one INSERT for their
// tags and one to look up the tasks that hold the keys of duplicates. Each
// statement's text is the same for any count, so the database prepares it
// once. Their audit rows go in with the transaction's (Tx.FlushAudit).

// insertTasksBulk inserts the tasks of u (one array per column, in input
// order) with ids taken from the tasks' sequence in that order, and
// returns per task its id and whether it was inserted: a task whose key
// exists in its namespace (also when a concurrent transaction holds it,
// which it waits for) is not. The rows are inserted in lock_order, the
// order of their (namespace, key) for rows with a key, so that two calls
// with keys in common wait for each other's keys in the same order, never
// in a cycle.
const insertTasksBulk = `WITH u AS MATERIALIZED (
	SELECT nextval((SELECT pg_get_serial_sequence('tasks', 'id')::regclass)) AS id, a.* FROM unnest(?::text[], ?::text[], ?::text[], ?::text[], ?::bigint[], ?::text[], ?::bigint[], ?::bigint[], ?::bigint[], ?::text[], ?::bigint[], ?::text[], ?::text[], ?::bigint[])
		WITH ORDINALITY AS a(namespace, workflow, version, input, priority, idempotency_key, run_at, good_until, remaining, limit_key, limit_n, tags, trace_context, lock_order, ord)
), ins AS (
	INSERT INTO tasks (id, namespace, workflow, version, state, input, priority, idempotency_key, run_at, good_until, created_at, remaining, limit_key, limit_n, tags, trace_context)
	SELECT id, namespace, workflow, version, 'pending', input, priority, idempotency_key, run_at, good_until, ?, remaining, limit_key, limit_n, tags, trace_context
	FROM u ORDER BY lock_order
	ON CONFLICT (namespace, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING RETURNING id
)
SELECT u.id, ins.id IS NOT NULL FROM u LEFT JOIN ins ON ins.id = u.id ORDER BY u.ord`

// insertStepsBulk inserts steps, one array per column of
// stepInsertColumns (columnArrays), where the sqldb.Querier cannot COPY or they
// are few.
var insertStepsBulk = `INSERT INTO steps (` + strings.Join(stepInsertColumns, ", ") + `)
	SELECT * FROM unnest(` + arrayParams(newStepRow(0, 0, &stepTemplate{}, store.TaskInsert{}, stepStart{})) + `)`

// arrayParams returns the parameters of an unnest of rows like row: one
// array a column, of the type of its values (columnArrays).
func arrayParams(row []any) string {
	ps := make([]string, len(row))
	for j, v := range row {
		switch v.(type) {
		case int64, *int64:
			ps[j] = "?::bigint[]"
		case string, *string:
			ps[j] = "?::text[]"
		default:
			panic(fmt.Sprintf("column %d: values of type %T", j, v))
		}
	}
	return strings.Join(ps, ", ")
}

// insertBulk writes tasks, none of them with Supersede, into out (in the
// same order). The first task of a call with a key that exists nowhere
// takes it; the others with that key, and those whose key exists, return
// the task holding it, as Duplicate.
func (t *submitTx) insertBulk(tpl templates, tasks []store.TaskInsert, out []store.InsertResult) error {
	if len(tasks) == 0 {
		return nil
	}
	// A key repeated within the call is written once, by its first task.
	type nsKey struct{ ns, key string }
	var first map[nsKey]bool
	rows := make([]int, 0, len(tasks)) // indexes into tasks of the rows to insert
	taskRows := make([][]any, 0, len(tasks))
	news := make([]newTask, len(tasks))
	nSteps := 0
	for i, in := range tasks {
		if in.IdempotencyKey != "" {
			k := nsKey{in.Namespace, in.IdempotencyKey}
			if first == nil {
				first = map[nsKey]bool{}
			}
			if first[k] {
				continue
			}
			first[k] = true
		}
		news[i] = t.newTask(in)
		rows = append(rows, i)
		nSteps += len(in.Steps)
		taskRows = append(taskRows, news[i].row(in))
	}
	got, err := t.writeTasks(taskRows, len(first) > 0)
	if err != nil {
		return fmt.Errorf("insert %d tasks: %w", len(rows), err)
	}
	steps := make([][]any, 0, nSteps)
	values := make([]any, 0, nSteps*len(stepInsertColumns))
	t.AuditRoom(len(rows) + nSteps)
	var tags tagColumnArrays
	var dupNS, dupKeys []string
	done := make([]bool, len(tasks))
	for r, i := range rows {
		in := tasks[i]
		if !got[r].ok {
			continue
		}
		id := got[r].id
		done[i] = true
		t.Audit(id, "", "", string(state.TaskPending), 0, "submitted")
		tags.add(id, in.Tags)
		steps, values = t.appendStepRows(steps, values, tpl.of(in.Steps), id, in, news[i].runAt)
		out[i] = store.InsertResult{Task: news[i].task(in, id, t.Now)}
	}
	for i, in := range tasks {
		if !done[i] {
			dupNS, dupKeys = append(dupNS, in.Namespace), append(dupKeys, in.IdempotencyKey)
		}
	}
	if err := t.insertSteps(steps); err != nil {
		return fmt.Errorf("insert the %d steps of %d tasks: %w", len(steps), len(rows), err)
	}
	if len(tags.task) > 0 {
		if _, err := t.Exec(`INSERT INTO task_tags (task_id, key, value) SELECT * FROM unnest(?::bigint[], ?::text[], ?::text[])`,
			tags.task, tags.key, tags.value); err != nil {
			return fmt.Errorf("insert the tags of %d tasks: %w", len(rows), err)
		}
	}
	if len(dupKeys) == 0 {
		return nil
	}
	res, err := t.Query(`SELECT `+sqltx.TaskColumns+` FROM tasks WHERE idempotency_key IS NOT NULL
		AND (namespace, idempotency_key) IN (SELECT * FROM unnest(?::text[], ?::text[]))`, dupNS, dupKeys)
	if err != nil {
		return fmt.Errorf("look up %d idempotency keys: %w", len(dupKeys), err)
	}
	existing, err := sqldb.Collect(res, sqltx.ScanTask)
	if err != nil {
		return fmt.Errorf("look up %d idempotency keys: %w", len(dupKeys), err)
	}
	holders := make(map[nsKey]store.Task, len(existing))
	for _, e := range existing {
		holders[nsKey{e.Namespace, e.IdempotencyKey}] = e
	}
	for i, in := range tasks {
		if done[i] {
			continue
		}
		h, ok := holders[nsKey{in.Namespace, in.IdempotencyKey}]
		if !ok {
			return fmt.Errorf("look up idempotency key %q: no task holds it", in.IdempotencyKey)
		}
		out[i] = store.InsertResult{Task: h, Duplicate: true}
	}
	return nil
}

// inserted is a task row written: its id, and whether it was inserted (not
// when its key exists).
type inserted struct {
	id int64
	ok bool
}

// taskCopyColumns are the columns a COPY of new tasks sets: the id, the
// columns of newTask.row, the state and the time of creation.
var taskCopyColumns = []string{"id", "namespace", "workflow", "version", "input", "priority", "idempotency_key", "run_at",
	"good_until", "remaining", "limit_key", "limit_n", "tags", "trace_context", "state", "created_at"}

// taskPending is the state of a task inserted, as a COPY's value.
var taskPending any = string(state.TaskPending)

// writeTasks inserts rows (newTask.row) and returns, per row, its id and
// whether it was inserted. Rows without keys cannot conflict: where the
// sqldb.Querier can COPY and they are many, their ids are taken from the
// sequence first and the rows copied, which costs the database about a
// third less than insertTasksBulk.
func (t *submitTx) writeTasks(rows [][]any, keyed bool) ([]inserted, error) {
	n := len(rows)
	if cp, ok := t.X.(sqldb.Copier); ok && !keyed && n >= sqldb.CopyMinRows {
		ids, err := t.Int64s(`SELECT nextval((SELECT pg_get_serial_sequence('tasks', 'id')::regclass)) FROM generate_series(1, ?)`, n)
		if err != nil {
			return nil, fmt.Errorf("take ids: %w", err)
		}
		if len(ids) != n {
			return nil, fmt.Errorf("take %d ids: %d came back", n, len(ids))
		}
		slices.Sort(ids)
		// Each row in one array of them all; the id by pointer, and the
		// time boxed once: no allocation a value.
		copied := make([][]any, n)
		cols := len(taskCopyColumns)
		all := make([]any, 0, n*cols)
		now := any(t.Now)
		got := make([]inserted, n)
		for i := range ids {
			start := len(all)
			all = append(append(append(all, &ids[i]), rows[i]...), taskPending, now)
			copied[i] = all[start:len(all):len(all)]
			got[i] = inserted{ids[i], true}
		}
		if _, err := cp.CopyFrom(t.Ctx, "tasks", taskCopyColumns, sqldb.NewCopyRows(copied)); err != nil {
			return nil, err
		}
		return got, nil
	}
	cols, err := columnArrays(rows)
	if err != nil {
		return nil, err
	}
	res, err := t.Query(insertTasksBulk, append(cols, lockOrder(rows, keyed), t.Now)...)
	if err != nil {
		return nil, err
	}
	got, err := sqldb.Collect(res, func(r sqldb.Row) (inserted, error) {
		var v inserted
		return v, r.Scan(&v.id, &v.ok)
	})
	if err != nil {
		return nil, err
	}
	if len(got) != n {
		return nil, fmt.Errorf("%d rows came back", len(got))
	}
	return got, nil
}

// lockOrder is the order rows (newTask.row) are inserted in: rows with a
// key by (namespace, key), the others after them.
func lockOrder(rows [][]any, keyed bool) []int64 {
	order := make([]int64, len(rows))
	if !keyed {
		return order
	}
	ns := func(i int) string { return rows[i][0].(string) }
	key := func(i int) *string { return rows[i][5].(*string) }
	byKey := make([]int, len(rows))
	for i := range byKey {
		byKey[i] = i
	}
	slices.SortFunc(byKey, func(a, b int) int {
		ka, kb := key(a), key(b)
		switch {
		case ka == nil || kb == nil:
			return cmp.Compare(sqltx.BoolInt(ka == nil), sqltx.BoolInt(kb == nil))
		case ns(a) != ns(b):
			return strings.Compare(ns(a), ns(b))
		}
		return strings.Compare(*ka, *kb)
	})
	for rank, i := range byKey {
		order[i] = int64(rank)
	}
	return order
}

// insertSteps writes steps (newStepRow): with COPY where the sqldb.Querier has it
// and they are many (it costs the database about a quarter less than the
// same INSERT), else with one INSERT of arrays.
func (t *submitTx) insertSteps(steps [][]any) error {
	if len(steps) == 0 {
		return nil
	}
	if c, ok := t.X.(sqldb.Copier); ok && len(steps) >= sqldb.CopyMinRows {
		_, err := c.CopyFrom(t.Ctx, "steps", stepInsertColumns, sqldb.NewCopyRows(steps))
		return err
	}
	cols, err := columnArrays(steps)
	if err != nil {
		return err
	}
	_, err = t.Exec(insertStepsBulk, cols...)
	return err
}

// columnArrays turns rows into one array per column, for unnest. The values
// of a column share one type: int64, string, *int64 or *string.
func columnArrays(rows [][]any) ([]any, error) {
	cols := make([]any, len(rows[0]))
	for j, v := range rows[0] {
		switch v.(type) {
		case int64:
			cols[j] = columnOf[int64](rows, j)
		case string:
			cols[j] = columnOf[string](rows, j)
		case *int64:
			cols[j] = columnOf[*int64](rows, j)
		case *string:
			cols[j] = columnOf[*string](rows, j)
		default:
			return nil, fmt.Errorf("column %d: values of type %T", j, v)
		}
	}
	return cols, nil
}

// columnOf is the values of column j of rows, which are all of type T.
func columnOf[T any](rows [][]any, j int) []T {
	out := make([]T, len(rows))
	for i, r := range rows {
		out[i] = r[j].(T)
	}
	return out
}

// tagColumnArrays holds task_tags rows to insert.
type tagColumnArrays struct {
	task       []int64
	key, value []string
}

func (c *tagColumnArrays) add(taskID int64, tags map[string]string) {
	for _, k := range sqltx.SortedKeys(tags) {
		c.task = append(c.task, taskID)
		c.key = append(c.key, k)
		c.value = append(c.value, tags[k])
	}
}
