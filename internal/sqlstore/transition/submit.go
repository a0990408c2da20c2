package transition

import (
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strconv"
	"strings"

	"github.com/weftrun/weft/internal/sqlstore/sqltx"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// This file holds the insertion of tasks and their steps in a transaction:
// one statement per task, or per group of plain tasks (submitbulk.go writes
// many at once where the database takes arrays).

// taskRowValues is how many values newTask.row gives.
var taskRowValues = len(newTask{}.row(store.TaskInsert{}))

// insertTask is the statement that submits one task: the values of
// newTask.row, then its time of creation (the columns of taskCopyColumns
// but the id). A key that exists in the namespace inserts nothing (also
// when a concurrent transaction holds it): the existing task is returned.
var insertTask = `INSERT INTO tasks (` + strings.Join(taskCopyColumns[1:], ", ") + `) VALUES (` + sqltx.Placeholders(taskRowValues) + `, 'pending', ?)
	ON CONFLICT (namespace, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING RETURNING id`

// stepsPerInsert bounds the rows of one statement of template.insert.
const stepsPerInsert = 64

// plainPerInsert bounds the rows of one statement of taskRowsInsert.
const plainPerInsert = 64

// taskRowInserts are the statements of taskRowsInsert, by the base-two
// logarithm of their number of rows, built once: a call's tasks go in
// statements of a power of two rows, so that their few texts are each
// prepared once.
var taskRowInserts = func() (q [7]string) {
	for i := range q {
		q[i] = taskRowsInsert(1 << i)
	}
	return q
}()

// taskRowsInsert returns the statement that inserts n tasks without keys,
// each row the values of newTask.row (from ?2 on), its state and its time
// of creation (?1): the columns of taskCopyColumns but the id. It returns
// their ids.
func taskRowsInsert(n int) string {
	var b strings.Builder
	b.WriteString(`INSERT INTO tasks (` + strings.Join(taskCopyColumns[1:], ", ") + `) VALUES `)
	p := 2
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteByte('(')
		for range taskRowValues {
			fmt.Fprintf(&b, "?%d, ", p)
			p++
		}
		b.WriteString(`'pending', ?1)`)
	}
	b.WriteString(" RETURNING id")
	return b.String()
}

// InsertTasks writes tasks in input order. Where the database takes arrays,
// the tasks are written in bulk, a constant number of statements whatever
// their count (submitbulk.go), except that a task with Supersede takes the
// path of one task in its turn; elsewhere the tasks without keys go in
// statements of many rows (insertPlain), the others take that path.
func (t *submitTx) InsertTasks(tasks []store.TaskInsert) ([]store.InsertResult, error) {
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
	if !t.H.Dialect.Arrays() {
		// Each run of tasks without keys goes in together (insertPlain);
		// a task with a key takes the path of one task.
		for i := 0; i < len(tasks); {
			j := i
			for j < len(tasks) && tasks[j].IdempotencyKey == "" && !tasks[j].Supersede {
				j++
			}
			if j > i {
				if err := t.insertPlain(tpl, tasks[i:j], out[i:j], i, len(tasks)); err != nil {
					return nil, err
				}
				i = j
				continue
			}
			r, err := t.insertOne(tpl, tasks[i], i, len(tasks))
			if err != nil {
				return nil, err
			}
			out[i], i = r, i+1
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

// insertOne writes task i of n with one statement for the task and its
// steps' (insertTaskSteps); a key that exists returns the task holding it,
// or with Supersede is taken from it.
func (t *submitTx) insertOne(tpl templates, in store.TaskInsert, i, n int) (store.InsertResult, error) {
	nt := t.newTask(in)
	var id int64
	holding := func() (store.Task, error) {
		return sqltx.ScanTask(t.QueryRow(`SELECT `+sqltx.TaskColumns+` FROM tasks WHERE namespace = ? AND idempotency_key = ?`, in.Namespace, in.IdempotencyKey))
	}
	var holder *store.Task // the task holding the key, where the insert looked it up first
	insert := func() error {
		holder = nil
		if in.IdempotencyKey != "" && t.H.Dialect.ClaimLock() == "" {
			// One writer at a time: a key found here stays held until
			// this transaction ends, and the insert it would refuse is
			// not tried, so it uses up no id (AUTOINCREMENT counts the
			// ids of inserts that conflict).
			task, err := holding()
			if err == nil {
				holder = &task
				return sql.ErrNoRows
			}
			if !errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("look up idempotency key %q: %w", in.IdempotencyKey, err)
			}
		}
		return t.QueryRow(insertTask, append(nt.row(in), t.Now)...).Scan(&id)
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
		if holder != nil {
			return store.InsertResult{Task: *holder, Duplicate: true}, nil
		}
		existing, err := holding()
		if err != nil {
			return store.InsertResult{}, fmt.Errorf("look up idempotency key %q: %w", in.IdempotencyKey, err)
		}
		return store.InsertResult{Task: existing, Duplicate: true}, nil
	}
	if err != nil {
		return store.InsertResult{}, fmt.Errorf("insert task %d of %d: %w", i+1, n, err)
	}
	out, err := t.submitted(tpl, id, in, nt)
	if err != nil {
		return store.InsertResult{}, err
	}
	if superseded != nil {
		if err := t.supersede(*superseded, id, in.IdempotencyKey); err != nil {
			return store.InsertResult{}, err
		}
		out.Superseded = superseded.id
	}
	return out, nil
}

// insertPlain writes tasks i to i+len(tasks) of n, none with a key or
// Supersede, where the database takes no arrays: their rows in statements
// of a power of two rows up to plainPerInsert (taskRowsInsert), then each
// one's steps (insertTaskSteps).
func (t *submitTx) insertPlain(tpl templates, tasks []store.TaskInsert, out []store.InsertResult, i, n int) error {
	news := make([]newTask, len(tasks))
	args := make([]any, 0, 1+min(len(tasks), plainPerInsert)*taskRowValues)
	for from := 0; from < len(tasks); {
		pow := bits.Len(uint(min(len(tasks)-from, plainPerInsert))) - 1
		k := 1 << pow
		args = append(args[:0], t.Now)
		for j := from; j < from+k; j++ {
			news[j] = t.newTask(tasks[j])
			args = append(args, news[j].row(tasks[j])...)
		}
		ids, err := t.Int64s(taskRowInserts[pow], args...)
		if err != nil {
			return fmt.Errorf("insert tasks %d to %d of %d: %w", i+from+1, i+from+k, n, err)
		}
		// SQLite gives a row without an id the one after the largest it
		// ever gave (tasks.id is an INTEGER PRIMARY KEY AUTOINCREMENT),
		// row after row: in order, the ids are the rows'.
		slices.Sort(ids)
		if len(ids) != k || ids[k-1]-ids[0] != int64(k-1) {
			return fmt.Errorf("insert tasks %d to %d of %d: the ids given, %v, are not one after another", i+from+1, i+from+k, n, ids)
		}
		for j, id := range ids {
			if out[from+j], err = t.submitted(tpl, id, tasks[from+j], news[from+j]); err != nil {
				return err
			}
		}
		from += k
	}
	return nil
}

// submitted completes the submission of task id (in, its insert; nt, its
// row) once its row is in: its audit entry, its tags and its steps.
func (t *submitTx) submitted(tpl templates, id int64, in store.TaskInsert, nt newTask) (store.InsertResult, error) {
	t.Audit(id, "", "", string(state.TaskPending), 0, "submitted")
	if err := t.insertTags(id, in.Tags); err != nil {
		return store.InsertResult{}, err
	}
	if err := t.insertTaskSteps(tpl.of(in.Steps), id, in, nt.runAt); err != nil {
		return store.InsertResult{}, err
	}
	return store.InsertResult{Task: nt.task(in, id, t.Now)}, nil
}

// insertTaskSteps writes the steps of task id (in, its insert, due at
// runAt) of templates tpl, and queues their audit rows. Where the database
// takes arrays, with one statement of arrays (insertSteps); elsewhere in
// statements of up to stepsPerInsert rows whose templates' columns are
// literals in their text (template.insert), so that a row binds only its
// task's values and its start's: each value bound is a call into SQLite,
// and binding all 31 columns of a row made a five-step task's insert twice
// as slow.
func (t *submitTx) insertTaskSteps(tpl *template, id int64, in store.TaskInsert, runAt int64) error {
	if len(tpl.steps) == 0 {
		return nil
	}
	if t.H.Dialect.Arrays() {
		rows, _ := t.appendStepRows(make([][]any, 0, len(tpl.steps)), make([]any, 0, len(tpl.steps)*len(stepInsertColumns)), tpl, id, in, runAt)
		if err := t.insertSteps(rows); err != nil {
			return fmt.Errorf("insert the steps of task %d: %w", id, err)
		}
		return nil
	}
	// One buffer of arguments for the steps of every task of the write:
	// each statement is done with it when exec returns.
	args := t.stepArgs[:0]
	defer func() { t.stepArgs = args[:0] }()
	for from := 0; from < len(tpl.steps); from += stepsPerInsert {
		to := min(from+stepsPerInsert, len(tpl.steps))
		args = appendStepTask(args[:0], id, in)
		for j := from; j < to; j++ {
			tp := &tpl.steps[j]
			st := t.start(tp, in.Priority, runAt)
			args = st.appendTo(args)
			t.Audit(id, tp.name, "", string(st.state), 0, "submitted")
		}
		if _, err := t.Exec(tpl.insert(from, to), args...); err != nil {
			return fmt.Errorf("insert the steps of task %d: %w", id, err)
		}
	}
	return nil
}

// appendStepRows appends to rows the rows of the steps of task id (in, its
// insert, due at runAt) of templates tpl (as newStepRow builds them), and
// queues their audit entries. The rows' values go into all, whose room the
// caller made for them: one allocation for a call's rows, not one a row,
// with the task's values boxed once and the template's once per call.
func (t *submitTx) appendStepRows(rows [][]any, all []any, tpl *template, id int64, in store.TaskInsert, runAt int64) ([][]any, []any) {
	task := appendStepTask(make([]any, 0, len(stepTaskColumns)), id, in)
	for j := range tpl.steps {
		tp := &tpl.steps[j]
		st := t.start(tp, in.Priority, runAt)
		start := len(all)
		all = append(st.appendTo(append(all, task...)), tp.values...)
		rows = append(rows, all[start:len(all):len(all)])
		t.Audit(id, tp.name, "", string(st.state), 0, "submitted")
	}
	return rows, all
}

// insert returns the statement that inserts steps from to to (at most
// stepsPerInsert, from a multiple of it) of a task where the database
// takes no arrays, built once: in each row, the task's columns are the
// parameters ?1 to ?5 (appendStepTask), the step's start's are five of its
// own (stepStart.appendTo), and its template's are literals.
func (tpl *template) insert(from, to int) string {
	c := from / stepsPerInsert
	if c < len(tpl.inserts) && tpl.inserts[c] != "" {
		return tpl.inserts[c]
	}
	var b strings.Builder
	b.WriteString(`INSERT INTO steps (` + strings.Join(stepInsertColumns, ", ") + `) VALUES `)
	p := len(stepTaskColumns) + 1
	var vals []any
	for j := from; j < to; j++ {
		if j > from {
			b.WriteString(", ")
		}
		b.WriteByte('(')
		for k := range stepTaskColumns {
			fmt.Fprintf(&b, "?%d, ", k+1)
		}
		for range stepStartColumns {
			fmt.Fprintf(&b, "?%d, ", p)
			p++
		}
		vals = tpl.steps[j].appendTo(vals[:0], j)
		for k, v := range vals {
			if k > 0 {
				b.WriteString(", ")
			}
			b.WriteString(literal(v))
		}
		b.WriteByte(')')
	}
	if c >= len(tpl.inserts) {
		tpl.inserts = append(tpl.inserts, make([]string, c+1-len(tpl.inserts))...)
	}
	tpl.inserts[c] = b.String()
	return tpl.inserts[c]
}

// literal is v, an int64 or a string, as an SQLite literal: a string in
// quotes with its quotes doubled, or, where it holds a NUL byte (which
// would end the statement's text), as the text of a blob of its bytes.
func literal(v any) string {
	switch v := v.(type) {
	case int64:
		return strconv.FormatInt(v, 10)
	case string:
		if strings.IndexByte(v, 0) >= 0 {
			return "CAST(X'" + hex.EncodeToString([]byte(v)) + "' AS TEXT)"
		}
		return "'" + strings.ReplaceAll(v, "'", "''") + "'"
	}
	panic(fmt.Sprintf("a literal of type %T", v)) // stepTemplate.appendTo gives none
}
