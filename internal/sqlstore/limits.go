package sqlstore

import (
	"fmt"
	"sort"
	"strings"
)

// This file holds the concurrency limits of the claim: namespace limits
// (the operator's, held in the database, and an engine's NamespaceCaps), a
// step's own limit (steps.limit_key, at most limit_n of its key running)
// and its workflow's limit of running tasks (steps.task_limit_key and
// tasks.limit_key: a task takes a place when its first step is claimed and
// holds it until it ends). The claim counts what runs under the limits of
// its candidates only, all in one statement, so a claim with no limit in
// force runs nothing of this.
//
// Exactness: on PostgreSQL the claim takes a transaction-scoped advisory
// lock per namespace and key before counting, so that the count and the
// claim under a limit are one engine's at a time, and sees every claim
// committed before it; locks and count are one round trip (lockAndCount).
// The first round of a claim waits for its locks, taken in one sorted
// order; later rounds only try theirs and treat a limit they cannot lock
// as full, so no two claims wait for each other. A claim
// holds no task or step row another claim could wait for while it waits.
// On SQLite the single writer does the same.

// keyRoom is how many more steps (or tasks) may start under each limit a
// claim has counted so far.
type keyRoom struct {
	caps     map[string]int // namespace limits in force
	ns       map[string]int
	step     map[string]int
	task     map[string]int
	pending  map[int64]bool // tasks read: true while not started
	admitted map[int64]bool // tasks this claim started under their workflow limit
	brk      *breakerRoom   // the circuit breakers that are not closed
	heldBack bool           // a candidate was left because its limit was full
}

func newKeyRoom(caps map[string]int) *keyRoom { return &keyRoom{caps: caps} }

// limited reports whether candidate c falls under a limit.
func (k *keyRoom) limited(c candidate) bool {
	if c.limitKey != "" || c.taskKey != "" {
		return true
	}
	_, capped := k.caps[c.namespace]
	return capped
}

// full lists the keys of m with no room left, for the next round to skip.
func full(m map[string]int) []string {
	var out []string
	for key, n := range m {
		if n <= 0 {
			out = append(out, key)
		}
	}
	sort.Strings(out)
	return out
}

// take reports whether candidate c fits its limits and, if it does, takes
// its places.
func (k *keyRoom) take(c candidate) bool {
	_, capped := k.caps[c.namespace]
	needTask := c.taskKey != "" && k.pending[c.taskID] && !k.admitted[c.taskID]
	switch {
	case capped && k.ns[c.namespace] <= 0,
		c.limitKey != "" && k.step[c.limitKey] <= 0,
		needTask && k.task[c.taskKey] <= 0:
		return false
	}
	if capped {
		k.ns[c.namespace]--
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
	return true
}

// The counts name "limit_key != ''" to match the partial indexes
// steps_limit_running and tasks_limit_running.

// limitKind is one kind of limit: how its locks are named, where its room
// is kept, and how what runs under it is counted.
type limitKind struct {
	lock  string
	room  *map[string]int
	count string // one SELECT of (kind, key, count) with %s for the keys
}

// count counts what runs under the limits of the candidates that this
// claim has not counted yet, locking each first on PostgreSQL (wait is
// false after the first round: a limit locked elsewhere is taken as full),
// and reads which of their tasks have not started.
func (t *txn) countKeys(ready []candidate, k *keyRoom, wait bool) error {
	if k.ns == nil {
		k.ns, k.step, k.task, k.pending = map[string]int{}, map[string]int{}, map[string]int{}, map[int64]bool{}
	}
	kinds := []limitKind{
		{"weft-cap:", &k.ns, `SELECT 0, namespace, count(*) FROM steps WHERE state = 'running' AND %s GROUP BY namespace`},
		{"weft-key:step:", &k.step, `SELECT 1, limit_key, count(*) FROM steps WHERE state = 'running' AND limit_key != '' AND %s GROUP BY limit_key`},
		{"weft-key:task:", &k.task, `SELECT 2, limit_key, count(*) FROM tasks WHERE state = 'running' AND limit_key != '' AND %s GROUP BY limit_key`},
	}
	limits := [3]map[string]int{{}, {}, {}}
	var tasks []int64
	for _, c := range ready {
		if n, capped := k.caps[c.namespace]; capped {
			if _, seen := k.ns[c.namespace]; !seen {
				limits[0][c.namespace] = n
			}
		}
		if _, seen := k.step[c.limitKey]; c.limitKey != "" && !seen {
			limits[1][c.limitKey] = c.limitN
		}
		if c.taskKey != "" {
			if _, seen := k.task[c.taskKey]; !seen {
				limits[2][c.taskKey] = c.taskN
			}
			if _, read := k.pending[c.taskID]; !read {
				k.pending[c.taskID] = false
				tasks = append(tasks, c.taskID)
			}
		}
	}
	// The locks, all kinds in one order.
	var names []lockName
	for i, kind := range kinds {
		for key := range limits[i] {
			names = append(names, lockName{kind.lock + key, key, i})
		}
	}
	sort.Slice(names, func(i, j int) bool { return names[i].name < names[j].name })
	var got []countRow
	var err error
	if t.s.d.LimitCounts != "" {
		got, err = t.lockAndCount(names, limits, tasks, wait)
	} else {
		// One writer at a time: nothing to lock. The keys are one
		// parameter per kind, so the statement has few texts.
		var parts []string
		var args []any
		columns := [...]string{"namespace", "limit_key", "limit_key"}
		for i, kind := range kinds {
			if keys := sortedKeys(limits[i]); len(keys) > 0 {
				in, inArgs := t.textIn(columns[i], keys)
				parts = append(parts, fmt.Sprintf(kind.count, in))
				args = append(args, inArgs...)
			}
		}
		if len(tasks) > 0 {
			// By primary key: (state || '') keeps the planner off the state
			// index, which would read every pending task.
			in, inArgs := t.idIn("id", tasks)
			parts = append(parts, `SELECT 3, '', id FROM tasks WHERE `+in+` AND (state || '') = 'pending'`)
			args = append(args, inArgs...)
		}
		if len(parts) == 0 {
			return nil
		}
		got, err = t.counts(strings.Join(parts, " UNION ALL "), args...)
	}
	if err != nil {
		return fmt.Errorf("count running steps and tasks under limits: %w", err)
	}
	for _, n := range names {
		(*kinds[n.kind].room)[n.key] = limits[n.kind][n.key]
	}
	for _, c := range got {
		switch c.kind {
		case -1: // a lock another claim holds: its limit is taken as full
			for _, n := range names {
				if n.name == c.key {
					(*kinds[n.kind].room)[n.key] = 0
				}
			}
		case 3:
			k.pending[c.n] = true
		default:
			(*kinds[c.kind].room)[c.key] -= int(c.n)
		}
	}
	return nil
}

// lockName is the lock of one limit: its name, and the kind and key of
// the limit.
type lockName struct {
	name, key string
	kind      int
}

// countRow is one row of a count: a kind (-1 a lock not taken, 0 a
// namespace, 1 a step key, 2 a workflow key, 3 a pending task), a key and a
// number.
type countRow struct {
	kind int
	key  string
	n    int64
}

func (t *txn) counts(q string, args ...any) ([]countRow, error) {
	rows, err := t.query(q, args...)
	if err != nil {
		return nil, err
	}
	return collect(rows, func(r Row) (countRow, error) {
		var c countRow
		err := r.Scan(&c.kind, &c.key, &c.n)
		return c, err
	})
}

// lockAndCount takes the limits' transaction-scoped locks (names, sorted)
// and counts what runs under them, in one statement (LimitCounts, on
// PostgreSQL the function weft_limit_counts: its counting query takes its
// snapshot after the locks are granted, so it sees every claim committed
// under them). It counts what the one-writer query in countKeys counts;
// the two change together. wait is false after a claim's first round: a
// lock held elsewhere is then not waited for but returned as not taken.
func (t *txn) lockAndCount(names []lockName, limits [3]map[string]int, tasks []int64, wait bool) ([]countRow, error) {
	lockNames := make([]string, len(names))
	for i, n := range names {
		lockNames[i] = n.name
	}
	return t.counts(t.s.d.LimitCounts, lockNames, wait,
		sortedKeys(limits[0]), sortedKeys(limits[1]), sortedKeys(limits[2]), tasks)
}

// lockLimit takes one transaction-scoped lock, waiting for it, where the
// dialect has locks; with one writer at a time there is nothing to take.
func (t *txn) lockLimit(name string) error {
	if t.s.d.Lock == "" {
		return nil
	}
	if _, err := t.exec(`SELECT `+t.s.d.Lock, name); err != nil {
		return fmt.Errorf("lock %s: %w", name, err)
	}
	return nil
}
