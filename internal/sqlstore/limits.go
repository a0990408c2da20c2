package sqlstore

import (
	"fmt"
	"sort"
)

// This file holds the concurrency keys of the claim: a step's own limit
// (steps.limit_key, at most limit_n of its key running) and its workflow's
// limit of running tasks (steps.task_limit_key, on the steps of a task that
// has not started; tasks.limit_key on the task). The claim counts what runs
// under the keys of its candidates only, so a step without keys costs
// nothing.
//
// Exactness: on PostgreSQL the claim takes a transaction-scoped advisory
// lock per key before counting, so that the count and the claim of a key are
// one engine's at a time, and sees every claim committed before it. The
// first round of a claim waits for its locks, taken in key order (after the
// namespace locks, also in order); later rounds only try theirs and treat a
// key they cannot lock as full, so no two claims wait for each other. On
// SQLite the single writer does the same.

// keyRoom is how many more steps (or tasks) each key counted so far in a
// claim may start.
type keyRoom struct {
	step     map[string]int
	task     map[string]int
	admitted map[int64]bool // tasks this claim started under their workflow limit
}

func newKeyRoom() *keyRoom { return &keyRoom{} }

// fullSteps and fullTasks list the keys with no room left, for the query's
// next round to skip.
func (k *keyRoom) fullSteps() []string { return fullKeys(k.step) }
func (k *keyRoom) fullTasks() []string { return fullKeys(k.task) }

func fullKeys(m map[string]int) []string {
	var out []string
	for key, n := range m {
		if n <= 0 {
			out = append(out, key)
		}
	}
	sort.Strings(out)
	return out
}

// take reports whether candidate c fits its keys and, if it does, takes its
// place; admit is true when it starts its task under the workflow limit.
func (k *keyRoom) take(c candidate) (ok, admit bool) {
	needTask := c.taskKey != "" && !k.admitted[c.taskID]
	if needTask && k.task[c.taskKey] <= 0 {
		return false, false
	}
	if c.limitKey != "" && k.step[c.limitKey] <= 0 {
		return false, false
	}
	if c.limitKey != "" {
		k.step[c.limitKey]--
	}
	if needTask {
		k.task[c.taskKey]--
		if k.admitted == nil {
			k.admitted = map[int64]bool{}
		}
		k.admitted[c.taskID] = true
	}
	return true, needTask
}

// countKeys counts what runs under the keys of the candidates not counted
// yet in this claim, locking each first on PostgreSQL: wait is false after
// the first round, when a key that is locked elsewhere is taken as full.
func (t *txn) countKeys(ready []candidate, k *keyRoom, wait bool) error {
	if k.step == nil {
		k.step, k.task = map[string]int{}, map[string]int{}
	}
	stepN, taskN := map[string]int{}, map[string]int{}
	for _, c := range ready {
		if _, seen := k.step[c.limitKey]; c.limitKey != "" && !seen {
			stepN[c.limitKey] = c.limitN
		}
		if _, seen := k.task[c.taskKey]; c.taskKey != "" && !seen && !k.admitted[c.taskID] {
			taskN[c.taskKey] = c.taskN
		}
	}
	for _, kind := range []struct {
		name  string
		limit map[string]int
		room  map[string]int
		count string
	}{
		{"step", stepN, k.step, `SELECT limit_key, count(*) FROM steps WHERE state = 'running' AND limit_key IN (%s) GROUP BY limit_key`},
		{"task", taskN, k.task, `SELECT limit_key, count(*) FROM tasks WHERE state = 'running' AND limit_key IN (%s) GROUP BY limit_key`},
	} {
		keys := make([]string, 0, len(kind.limit))
		for key := range kind.limit {
			keys = append(keys, key)
		}
		sort.Strings(keys)
		var counted []any
		for _, key := range keys {
			locked, err := t.lockKey("weft-key:"+kind.name+":"+key, wait)
			if err != nil {
				return err
			}
			if !locked {
				kind.room[key] = 0
				continue
			}
			kind.room[key] = kind.limit[key]
			counted = append(counted, key)
		}
		if len(counted) == 0 {
			continue
		}
		rows, err := t.query(fmt.Sprintf(kind.count, placeholders(len(counted))), counted...)
		if err != nil {
			return fmt.Errorf("count running under %s limits: %w", kind.name, err)
		}
		running, err := collect(rows, scanNamespaceRow)
		if err != nil {
			return fmt.Errorf("count running under %s limits: %w", kind.name, err)
		}
		for _, r := range running {
			kind.room[r.namespace] -= int(r.n)
		}
	}
	return nil
}

// lockKey takes the transaction-scoped lock of a key where the dialect has
// one (waiting for it, or only trying), and reports whether it holds it.
func (t *txn) lockKey(name string, wait bool) (bool, error) {
	if t.s.d.LockCap == "" {
		return true, nil // one writer at a time
	}
	if wait || t.s.d.TryLockCap == "" {
		if _, err := t.exec(t.s.d.LockCap, name); err != nil {
			return false, fmt.Errorf("lock limit %s: %w", name, err)
		}
		return true, nil
	}
	var ok bool
	if err := t.queryRow(t.s.d.TryLockCap, name).Scan(&ok); err != nil {
		return false, fmt.Errorf("lock limit %s: %w", name, err)
	}
	return ok, nil
}

// admitTasks clears the workflow limit key from the steps of tasks the
// claim started: the task now holds its place (tasks.limit_key, counted
// while it runs), and its other steps no longer wait for one.
func (t *txn) admitTasks(ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	if _, err := t.exec(`UPDATE steps SET task_limit_key = '' WHERE task_limit_key != '' AND task_id IN (`+placeholders(len(ids))+`)`, args...); err != nil {
		return fmt.Errorf("admit tasks under their workflow limit: %w", err)
	}
	return nil
}
