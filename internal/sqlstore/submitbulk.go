package sqlstore

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// This file writes many tasks in bulk where the database takes arrays, with
// statements that do not grow with the number of tasks: for the tasks, one
// INSERT of arrays (or, without keys, one statement for their ids and a
// COPY), then one COPY or INSERT for all their steps, one INSERT for their
// tags and one to look up the tasks that hold the keys of duplicates. Each
// statement's text is the same for any count, so the database prepares it
// once. Their audit rows go in with the transaction's (txn.flushAudit).

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
		WITH ORDINALITY AS a(namespace, workflow, version, input, priority, idempotency_key, run_at, good_until, remaining, limit_key, limit_n, tags, traceparent, lock_order, ord)
), ins AS (
	INSERT INTO tasks (id, namespace, workflow, version, state, input, priority, idempotency_key, run_at, good_until, created_at, remaining, limit_key, limit_n, tags, traceparent)
	SELECT id, namespace, workflow, version, 'pending', input, priority, idempotency_key, run_at, good_until, ?, remaining, limit_key, limit_n, tags, traceparent
	FROM u ORDER BY lock_order
	ON CONFLICT (namespace, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING RETURNING id
)
SELECT u.id, ins.id IS NOT NULL FROM u LEFT JOIN ins ON ins.id = u.id ORDER BY u.ord`

// stepInsertColumns are the columns a new step's row sets, in the order of
// stepColumnArrays.args.
var stepInsertColumns = []string{"task_id", "idx", "name", "handler", "namespace", "state", "deps", "children", "priority", "sort_key",
	"max_attempts", "ttl", "expires_at", "run_at", "kind", "trigger_rule", "signal", "wait_timeout", "run_timeout", "workflow",
	"limit_key", "limit_n", "task_limit_key", "task_limit_n", "preemptible", "rate_key", "rate_n", "rate_per",
	"breaker_key", "breaker_n", "breaker_cooldown"}

// insertStepsBulk inserts steps, one array per column, where the Querier
// cannot COPY.
var insertStepsBulk = `INSERT INTO steps (` + strings.Join(stepInsertColumns, ", ") + `)
	SELECT * FROM unnest(?::bigint[], ?::bigint[], ?::text[], ?::text[], ?::text[], ?::text[], ?::text[], ?::text[], ?::bigint[], ?::bigint[],
		?::bigint[], ?::bigint[], ?::bigint[], ?::bigint[], ?::text[], ?::text[], ?::text[], ?::bigint[], ?::bigint[], ?::text[],
		?::text[], ?::bigint[], ?::text[], ?::bigint[], ?::bigint[], ?::text[], ?::bigint[], ?::bigint[],
		?::text[], ?::bigint[], ?::bigint[])`

// insertBulk writes tasks, none of them with Supersede, into out (in the
// same order). The first task of a call with a key that exists nowhere
// takes it; the others with that key, and those whose key exists, return
// the task holding it, as Duplicate.
func (t *txn) insertBulk(tpl templates, tasks []store.TaskInsert, out []store.InsertResult) error {
	if len(tasks) == 0 {
		return nil
	}
	// A key repeated within the call is written once, by its first task.
	type nsKey struct{ ns, key string }
	var first map[nsKey]bool
	rows := make([]int, 0, len(tasks)) // indexes into tasks of the rows to insert
	var c taskColumnArrays
	c.reserve(len(tasks))
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
		c.add(in, news[i])
	}
	got, err := t.writeTasks(&c, len(first) > 0)
	if err != nil {
		return fmt.Errorf("insert %d tasks: %w", len(rows), err)
	}
	var steps stepColumnArrays
	steps.reserve(nSteps)
	t.audits = slices.Grow(t.audits, len(rows)+nSteps)
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
		t.audit(id, "", "", string(state.TaskPending), 0, "submitted")
		tags.add(id, in.Tags)
		for j, tp := range tpl.of(in.Steps) {
			st := t.start(&tp, in.Priority, news[i].runAt)
			steps.add(id, j, &tp, in, st)
			t.audit(id, tp.name, "", string(st.state), 0, "submitted")
		}
		out[i] = store.InsertResult{Task: news[i].task(in, id, t.now)}
	}
	for i, in := range tasks {
		if !done[i] {
			dupNS, dupKeys = append(dupNS, in.Namespace), append(dupKeys, in.IdempotencyKey)
		}
	}
	if err := t.insertSteps(&steps); err != nil {
		return fmt.Errorf("insert the %d steps of %d tasks: %w", steps.n(), len(rows), err)
	}
	if len(tags.task) > 0 {
		if _, err := t.exec(`INSERT INTO task_tags (task_id, key, value) SELECT * FROM unnest(?::bigint[], ?::text[], ?::text[])`,
			tags.task, tags.key, tags.value); err != nil {
			return fmt.Errorf("insert the tags of %d tasks: %w", len(rows), err)
		}
	}
	if len(dupKeys) == 0 {
		return nil
	}
	res, err := t.query(`SELECT `+taskColumns+` FROM tasks WHERE idempotency_key IS NOT NULL
		AND (namespace, idempotency_key) IN (SELECT * FROM unnest(?::text[], ?::text[]))`, dupNS, dupKeys)
	if err != nil {
		return fmt.Errorf("look up %d idempotency keys: %w", len(dupKeys), err)
	}
	existing, err := collect(res, scanTask)
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

// copyMinRows is the fewest rows written with COPY: COPY costs the
// database less per row than an INSERT, but a round trip more (and the
// tasks' ids one more statement), which a few rows do not pay back.
const copyMinRows = 64

// inserted is a task row written: its id, and whether it was inserted (not
// when its key exists).
type inserted struct {
	id int64
	ok bool
}

// taskCopyColumns are the columns a COPY of new tasks sets, in the order of
// taskRows.Values.
var taskCopyColumns = []string{"id", "namespace", "workflow", "version", "state", "input", "priority", "idempotency_key", "run_at",
	"good_until", "created_at", "remaining", "limit_key", "limit_n", "tags", "traceparent"}

// writeTasks inserts the rows of c and returns, per row, its id and whether
// it was inserted. Rows without keys cannot conflict: where the Querier can
// COPY and they are many, their ids are taken from the sequence first and
// the rows copied, which costs the database about a third less than
// insertTasksBulk.
func (t *txn) writeTasks(c *taskColumnArrays, keyed bool) ([]inserted, error) {
	n := len(c.namespace)
	if cp, ok := t.x.(Copier); ok && !keyed && n >= copyMinRows {
		ids, err := t.int64s(`SELECT nextval((SELECT pg_get_serial_sequence('tasks', 'id')::regclass)) FROM generate_series(1, ?)`, n)
		if err != nil {
			return nil, fmt.Errorf("take ids: %w", err)
		}
		if len(ids) != n {
			return nil, fmt.Errorf("take %d ids: %d came back", n, len(ids))
		}
		slices.Sort(ids)
		if _, err := cp.CopyFrom(t.ctx, "tasks", taskCopyColumns, &taskRows{c: c, ids: ids, now: t.now}); err != nil {
			return nil, err
		}
		got := make([]inserted, n)
		for i, id := range ids {
			got[i] = inserted{id, true}
		}
		return got, nil
	}
	c.lockOrder(keyed)
	res, err := t.query(insertTasksBulk, append(c.args(), t.now)...)
	if err != nil {
		return nil, err
	}
	got, err := collect(res, func(r Row) (inserted, error) {
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

// taskRows yields the rows of taskColumnArrays to a COPY, with their ids.
type taskRows struct {
	c    *taskColumnArrays
	ids  []int64
	now  int64
	next int
	row  []any
}

func (r *taskRows) Next() bool { r.next++; return r.next <= len(r.ids) }

func (r *taskRows) Err() error { return nil }

func (r *taskRows) Values() ([]any, error) {
	i, c := r.next-1, r.c
	r.row = append(r.row[:0], r.ids[i], c.namespace[i], c.workflow[i], c.version[i], string(state.TaskPending), c.input[i], c.priority[i],
		c.keys[i], c.runAt[i], c.goodUntil[i], r.now, c.remaining[i], c.limitKey[i], c.limitN[i], c.tags[i], c.traceparent[i])
	return r.row, nil
}

// taskColumnArrays holds the tasks to insert, one array per column of
// insertTasksBulk.
type taskColumnArrays struct {
	namespace, workflow, version, input, limitKey, traceparent []string
	priority, runAt, remaining, limitN                         []int64
	goodUntil                                                  []*int64
	keys, tags                                                 []*string
	order                                                      []int64 // lock order (see insertTasksBulk)
}

// reserve makes room for n tasks.
func (c *taskColumnArrays) reserve(n int) {
	reserve(n, &c.namespace, &c.workflow, &c.version, &c.input, &c.limitKey, &c.traceparent)
	reserve(n, &c.priority, &c.runAt, &c.remaining, &c.limitN)
	reserve(n, &c.goodUntil)
	reserve(n, &c.keys, &c.tags)
}

func (c *taskColumnArrays) add(in store.TaskInsert, n newTask) {
	c.namespace = append(c.namespace, in.Namespace)
	c.workflow = append(c.workflow, in.Workflow)
	c.version = append(c.version, in.Version)
	c.input = append(c.input, string(n.input))
	c.priority = append(c.priority, int64(in.Priority))
	c.keys = append(c.keys, n.key)
	c.runAt = append(c.runAt, n.runAt)
	c.goodUntil = append(c.goodUntil, n.goodUntil)
	c.remaining = append(c.remaining, int64(len(in.Steps)))
	c.limitKey = append(c.limitKey, in.LimitKey)
	c.limitN = append(c.limitN, int64(in.Limit))
	c.tags = append(c.tags, n.tags)
	c.traceparent = append(c.traceparent, in.TraceParent)
}

func (c *taskColumnArrays) args() []any {
	return []any{c.namespace, c.workflow, c.version, c.input, c.priority, c.keys, c.runAt, c.goodUntil, c.remaining, c.limitKey, c.limitN, c.tags, c.traceparent, c.order}
}

// lockOrder sets the order rows are inserted in: rows with a key by
// (namespace, key), the others after them.
func (c *taskColumnArrays) lockOrder(keys bool) {
	n := len(c.namespace)
	c.order = make([]int64, n)
	if !keys {
		return
	}
	rows := make([]int, n)
	for i := range rows {
		rows[i] = i
	}
	slices.SortFunc(rows, func(a, b int) int {
		ka, kb := c.keys[a], c.keys[b]
		switch {
		case ka == nil || kb == nil:
			return cmp.Compare(boolInt(ka == nil), boolInt(kb == nil))
		case c.namespace[a] != c.namespace[b]:
			return strings.Compare(c.namespace[a], c.namespace[b])
		}
		return strings.Compare(*ka, *kb)
	})
	for rank, i := range rows {
		c.order[i] = int64(rank)
	}
}

// stepColumnArrays holds the steps to insert, one array per column of
// insertStepsBulk.
type stepColumnArrays struct {
	task, idx                                       []int64
	name, handler, namespace, state, deps, children []string
	priority, sortKey, maxAttempts, ttl             []int64
	expires, runAt                                  []*int64
	kind, rule, signal                              []string
	waitTimeout, runTimeout                         []int64
	workflow, limitKey                              []string
	limitN                                          []int64
	taskLimitKey                                    []string
	taskLimitN, preemptible                         []int64
	rateKey                                         []string
	rateN, ratePer                                  []int64
	breakerKey                                      []string
	breakerN, breakerCooldown                       []int64
}

// reserve makes room for n steps.
func (c *stepColumnArrays) reserve(n int) {
	reserve(n, &c.task, &c.idx, &c.priority, &c.sortKey, &c.maxAttempts, &c.ttl, &c.waitTimeout, &c.runTimeout, &c.limitN, &c.taskLimitN,
		&c.preemptible, &c.rateN, &c.ratePer, &c.breakerN, &c.breakerCooldown)
	reserve(n, &c.name, &c.handler, &c.namespace, &c.state, &c.deps, &c.children, &c.kind, &c.rule, &c.signal, &c.workflow, &c.limitKey,
		&c.taskLimitKey, &c.rateKey, &c.breakerKey)
	reserve(n, &c.expires, &c.runAt)
}

// reserve gives each of cols room for n values.
func reserve[T any](n int, cols ...*[]T) {
	for _, c := range cols {
		*c = make([]T, 0, n)
	}
}

func (c *stepColumnArrays) n() int { return len(c.task) }

func (c *stepColumnArrays) add(taskID int64, idx int, tp *stepTemplate, in store.TaskInsert, st stepStart) {
	c.task = append(c.task, taskID)
	c.idx = append(c.idx, int64(idx))
	c.name = append(c.name, tp.name)
	c.handler = append(c.handler, tp.handler)
	c.namespace = append(c.namespace, in.Namespace)
	c.state = append(c.state, string(st.state))
	c.deps = append(c.deps, tp.deps)
	c.children = append(c.children, tp.children)
	c.priority = append(c.priority, st.priority)
	c.sortKey = append(c.sortKey, st.sortKey)
	c.maxAttempts = append(c.maxAttempts, tp.maxAttempts)
	c.ttl = append(c.ttl, tp.ttl)
	c.expires = append(c.expires, st.expires)
	c.runAt = append(c.runAt, st.runAt)
	c.kind = append(c.kind, tp.kind)
	c.rule = append(c.rule, tp.rule)
	c.signal = append(c.signal, tp.signal)
	c.waitTimeout = append(c.waitTimeout, tp.waitTimeout)
	c.runTimeout = append(c.runTimeout, tp.runTimeout)
	c.workflow = append(c.workflow, in.Workflow)
	c.limitKey = append(c.limitKey, tp.limitKey)
	c.limitN = append(c.limitN, tp.limitN)
	c.taskLimitKey = append(c.taskLimitKey, in.LimitKey)
	c.taskLimitN = append(c.taskLimitN, int64(in.Limit))
	c.preemptible = append(c.preemptible, tp.preemptible)
	c.rateKey = append(c.rateKey, tp.rateKey)
	c.rateN = append(c.rateN, tp.rateN)
	c.ratePer = append(c.ratePer, tp.ratePer)
	c.breakerKey = append(c.breakerKey, tp.breakerKey)
	c.breakerN = append(c.breakerN, tp.breakerN)
	c.breakerCooldown = append(c.breakerCooldown, tp.breakerCooldown)
}

func (c *stepColumnArrays) args() []any {
	return []any{c.task, c.idx, c.name, c.handler, c.namespace, c.state, c.deps, c.children, c.priority, c.sortKey, c.maxAttempts, c.ttl,
		c.expires, c.runAt, c.kind, c.rule, c.signal, c.waitTimeout, c.runTimeout, c.workflow, c.limitKey, c.limitN, c.taskLimitKey,
		c.taskLimitN, c.preemptible, c.rateKey, c.rateN, c.ratePer, c.breakerKey, c.breakerN, c.breakerCooldown}
}

// insertSteps writes steps: with COPY where the Querier has it and they are
// many (it costs the database about a quarter less than the same INSERT),
// else with one INSERT of arrays.
func (t *txn) insertSteps(steps *stepColumnArrays) error {
	if steps.n() == 0 {
		return nil
	}
	if c, ok := t.x.(Copier); ok && steps.n() >= copyMinRows {
		_, err := c.CopyFrom(t.ctx, "steps", stepInsertColumns, &stepRows{c: steps})
		return err
	}
	_, err := t.exec(insertStepsBulk, steps.args()...)
	return err
}

// stepRows yields the rows of stepColumnArrays to a COPY.
type stepRows struct {
	c    *stepColumnArrays
	next int
	row  []any
}

func (r *stepRows) Next() bool { r.next++; return r.next <= r.c.n() }

func (r *stepRows) Err() error { return nil }

func (r *stepRows) Values() ([]any, error) {
	i, c := r.next-1, r.c
	r.row = append(r.row[:0], c.task[i], c.idx[i], c.name[i], c.handler[i], c.namespace[i], c.state[i], c.deps[i], c.children[i], c.priority[i],
		c.sortKey[i], c.maxAttempts[i], c.ttl[i], c.expires[i], c.runAt[i], c.kind[i], c.rule[i], c.signal[i], c.waitTimeout[i], c.runTimeout[i],
		c.workflow[i], c.limitKey[i], c.limitN[i], c.taskLimitKey[i], c.taskLimitN[i], c.preemptible[i], c.rateKey[i], c.rateN[i], c.ratePer[i],
		c.breakerKey[i], c.breakerN[i], c.breakerCooldown[i])
	return r.row, nil
}

// tagColumnArrays holds task_tags rows to insert.
type tagColumnArrays struct {
	task       []int64
	key, value []string
}

func (c *tagColumnArrays) add(taskID int64, tags map[string]string) {
	for _, k := range sortedKeys(tags) {
		c.task = append(c.task, taskID)
		c.key = append(c.key, k)
		c.value = append(c.value, tags[k])
	}
}
