package claim

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/weftrun/weft/internal/sqlstore/sqldb"
	"github.com/weftrun/weft/internal/sqlstore/sqltx"
)

// This file holds the concurrency limits of the claim: namespace limits
// (the operator's, held in the database, and an engine's NamespaceCaps), a
// step's own limit (steps.limit_key, at most limit_n of its key running)
// and its workflow's limit of running tasks (steps.task_limit_key and
// tasks.limit_key: a task takes a place when its first step is claimed and
// holds it until it ends). A limit key belongs to its namespace: the same
// key in two namespaces is two limits. The claim counts only for the
// limits of its candidates, so a claim with no limit in force runs nothing
// of this.
//
// What is counted: for each namespace with a limited candidate, the steps
// running in it and the tasks under a workflow limit running in it. These
// two numbers bound every limit of the namespace: a key whose limit is at
// least that bound plus the whole claim cannot bind in this claim, and is
// not counted on its own. Only keys near their limit are counted one by
// one (with the tasks of their candidates that have not started), in one
// more statement. So limits set high cost two counts a claim, whatever the
// number of keys; on PostgreSQL, while far from binding, not even those,
// nor the lock below: the counts are bounded from the last one, and the
// bound checked by the claim statement (limitbounds.go).
//
// Exactness: every claim that counts what runs under a limit of a
// namespace holds the namespace's transaction-scoped lock (PostgreSQL:
// "weft-ns:" and the namespace, within the schema) from before it counts
// until it commits, so counting claims under one namespace's limits are
// one engine's at a time, and each count sees every claim committed
// before it; what claims that bound instead add meanwhile, each claim
// checks by the namespace's totals (limitbounds.go). The lock and the
// namespace's counts are one round trip, a function whose counting query
// takes its snapshot after the locks (LimitRoom). A claim takes the locks of the
// namespaces its last claim met limits in with its first statement, in
// one sorted order, waiting for them (predictLimits); others, found among
// its candidates, it waits for only while it holds no lock yet, and
// otherwise only tries, taking the namespace's limits as full for this
// claim when another holds them, so no two claims wait for each other. A
// claim holds no task or step row another claim could wait for while it
// waits. On SQLite the single writer does the same without locks.

// nsKey is a limit key in its namespace.
type nsKey struct{ ns, key string }

// nsCount is what runs in one namespace with limits, as a claim counted
// it: running steps, running tasks under a workflow limit; missed when
// another claim held the namespace's lock (its limits count as full).
type nsCount struct {
	steps, tasks int
	missed       bool
	// exact: counted, with the totals read before the count; bounded:
	// not counted but bounded from the handle's anchor, whose count and
	// totals these are, under the smallest limit floor (limitbounds.go)
	exact, bounded           bool
	floor                    int
	stepsTotal, tasksTotal   int64
	anchorSteps, anchorTasks int64
}

// KeyRoom is how many more steps (or tasks) may start under each limit a
// claim has met so far.
type KeyRoom struct {
	caps     map[string]int // namespace limits in force
	limit    int            // the most steps the whole claim takes
	version  int64          // of the policies the claim applies
	own      map[string]int // the engine's own namespace caps (in caps too)
	counted  map[string]nsCount
	met      map[string]bool // namespaces of the limited candidates seen
	floor    map[string]int  // the smallest limit met in each of them
	ns       map[string]int  // room under a namespace limit
	step     map[nsKey]int   // room under a step key
	task     map[nsKey]int   // room under a workflow key
	bounded  map[nsKey]bool  // workflow keys their namespace's bound settled
	pending  map[int64]bool  // tasks taken to start with their step: they need a place
	admitted map[int64]bool  // tasks this claim started under their workflow limit
	breakers *breakerRoom    // the circuit breakers that are not closed
	heldBack bool            // a candidate was left because its limit was full
}

// newKeyRoom is the room of a claim of at most limit steps under the
// policies pol and the engine's own namespace caps.
func newKeyRoom(pol *policySet, own map[string]int, limit int) *KeyRoom {
	return &KeyRoom{caps: pol.capsWith(own), limit: limit, version: pol.Version, own: own,
		counted: map[string]nsCount{}, met: map[string]bool{}, floor: map[string]int{}, ns: map[string]int{},
		step: map[nsKey]int{}, task: map[nsKey]int{}, bounded: map[nsKey]bool{}, pending: map[int64]bool{}}
}

// limited reports whether candidate c falls under a limit.
func (k *KeyRoom) limited(c candidate) bool {
	if c.limitKey != "" || c.taskKey != "" {
		return true
	}
	_, capped := k.caps[c.namespace]
	return capped
}

// full lists the namespaces of m with no room left, for the next round to
// skip.
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

// fullKeys lists the keys of m with no room left in some namespace, for
// the next round to skip.
func fullKeys(m map[nsKey]int) []string {
	seen := map[string]bool{}
	var out []string
	for k, n := range m {
		if n <= 0 && !seen[k.key] {
			seen[k.key] = true
			out = append(out, k.key)
		}
	}
	sort.Strings(out)
	return out
}

// take reports whether candidate c fits its limits and, if it does, takes
// its places.
func (k *KeyRoom) take(c candidate) bool {
	_, capped := k.caps[c.namespace]
	sk, tk := nsKey{c.namespace, c.limitKey}, nsKey{c.namespace, c.taskKey}
	needTask := c.taskKey != "" && k.pending[c.taskID] && !k.admitted[c.taskID]
	switch {
	case capped && k.ns[c.namespace] <= 0,
		c.limitKey != "" && k.step[sk] <= 0,
		needTask && k.task[tk] <= 0:
		return false
	}
	if capped {
		k.ns[c.namespace]--
	}
	if c.limitKey != "" {
		k.step[sk]--
	}
	if needTask {
		k.task[tk]--
		if k.admitted == nil {
			k.admitted = map[int64]bool{}
		}
		k.admitted[c.taskID] = true
	}
	return true
}

// lowest keeps the smallest limit of candidate c's namespace met so far.
func (k *KeyRoom) lowest(c candidate) {
	low := func(n int) {
		if f, ok := k.floor[c.namespace]; !ok || n < f {
			k.floor[c.namespace] = n
		}
	}
	if limit, capped := k.caps[c.namespace]; capped {
		low(limit)
	}
	if c.limitKey != "" {
		low(c.limitN)
	}
	if c.taskKey != "" {
		low(c.taskN)
	}
}

// countKeys finds the room under the limits of the candidates in ready
// that this claim has not met yet: it counts what runs in their
// namespaces (locking each on PostgreSQL; wait is false after the first
// round, and a namespace locked elsewhere is then taken as full), and then
// counts one by one only the keys that bound cannot settle.
func (t *ClaimTx) countKeys(ready []candidate, k *KeyRoom, wait bool) error {
	var namespaces []string
	for _, c := range ready {
		if !k.limited(c) {
			continue
		}
		k.met[c.namespace] = true
		k.lowest(c)
		if _, ok := k.counted[c.namespace]; !ok && !slices.Contains(namespaces, c.namespace) {
			namespaces = append(namespaces, c.namespace)
		}
	}
	if len(namespaces) > 0 {
		sort.Strings(namespaces)
		// Waiting only while no lock is held: claims wait for locks in
		// one order (the namespaces', then the fair shares').
		if err := t.countNamespaces(namespaces, k, wait && !t.limitLocked && !t.fairLocked); err != nil {
			return err
		}
	}
	// Each key not met yet: settled by its namespace's bound, or counted.
	steps, tasks := map[nsKey]int{}, map[nsKey]int{}
	for _, c := range ready {
		n := k.counted[c.namespace]
		if limit, capped := k.caps[c.namespace]; capped {
			if _, met := k.ns[c.namespace]; !met {
				k.ns[c.namespace] = limit - n.steps
				if n.missed {
					k.ns[c.namespace] = 0
				}
			}
		}
		if c.limitKey != "" {
			k.settle(k.step, nsKey{c.namespace, c.limitKey}, c.limitN, n.steps, n.missed, steps)
		}
		if tk := (nsKey{c.namespace, c.taskKey}); c.taskKey != "" && k.settle(k.task, tk, c.taskN, n.tasks, n.missed, tasks) {
			k.bounded[tk] = true
		}
	}
	// A task under a key its bound settled may take a place whether it
	// started or not (there is room); one whose namespace another claim
	// holds is taken to need one (there is none); under a key counted one
	// by one, in this round or before, read which started.
	var pending []int64
	for _, c := range ready {
		if _, read := k.pending[c.taskID]; c.taskKey == "" || read {
			continue
		}
		if k.bounded[nsKey{c.namespace, c.taskKey}] || k.counted[c.namespace].missed {
			k.pending[c.taskID] = true
		} else {
			k.pending[c.taskID] = false
			pending = append(pending, c.taskID)
		}
	}
	if len(steps) == 0 && len(tasks) == 0 && len(pending) == 0 {
		return nil
	}
	return t.countExact(steps, tasks, pending, k)
}

// settle finds the room under key, of limit, in room, unless it was found
// before: none when another claim holds the namespace (missed), what the
// limit leaves of running (what runs in the namespace) when that is room
// for the whole claim, else it adds key to exact, to be counted on its
// own. It reports whether running settled it.
func (k *KeyRoom) settle(room map[nsKey]int, key nsKey, limit, running int, missed bool, exact map[nsKey]int) bool {
	if _, met := room[key]; met {
		return false
	}
	switch {
	case missed:
		room[key] = 0
	case limit >= running+k.limit:
		room[key] = limit - running
		return true
	default:
		exact[key] = limit
	}
	return false
}

// predictedLimits returns the namespaces whose limits the next claim
// locks and counts first: those its last claim met limits in, where the
// store has locks.
func (s *Planner) predictedLimits() []string {
	if s.Dialect.LimitRoom() == "" {
		return nil
	}
	if p := s.limitNamespaces.Load(); p != nil {
		return *p
	}
	return nil
}

// predictLimits keeps the namespaces a claim met limits in for the next
// claim (only when they changed).
func (s *Planner) predictLimits(met map[string]bool) {
	if s.Dialect.LimitRoom() == "" {
		return
	}
	last := s.predictedLimits()
	if len(last) == len(met) {
		same := true
		for _, ns := range last {
			same = same && met[ns]
		}
		if same {
			return
		}
	}
	next := sqltx.SortedKeys(met)
	s.limitNamespaces.Store(&next)
}

// namespaceCounts counts, for a one-writer store, what countNamespaces
// reads from LimitRoom on PostgreSQL (%s: the namespaces); the two change
// together. Kinds: 0 running steps, 4 running tasks under a workflow limit.
const namespaceCounts = `SELECT 0, namespace, count(*) FROM steps WHERE state = 'running' AND %[1]s GROUP BY namespace
	UNION ALL SELECT 4, namespace, count(*) FROM tasks WHERE state = 'running' AND limit_key != '' AND %[1]s GROUP BY namespace`

// countNamespaces counts what runs in each namespace of namespaces
// (sorted), locking each first where the store has several writers (wait:
// wait for the locks, else only try them), unless it bounds it from the
// handle's anchors (limitbounds.go).
func (t *ClaimTx) countNamespaces(namespaces []string, k *KeyRoom, wait bool) error {
	var got []countRow
	var err error
	if t.H.Dialect.LimitRoom() != "" {
		// Rows of limit_claims are taken in the namespaces' order, by
		// every claim, and a claim that bounds takes them without the
		// namespace's lock: a namespace met after this claim added to the
		// totals of one named after it waits for the next claim, so that
		// no two claims wait for each other's rows.
		namespaces = slices.DeleteFunc(namespaces, func(ns string) bool {
			if len(t.limitTotals) == 0 || ns > t.totalsMax {
				return false
			}
			k.counted[ns] = nsCount{missed: true}
			return true
		})
		var bounds map[string]nsCount
		bounds, namespaces = t.Plan.splitBounds(namespaces, k.version, t.Now, k.limit, k.own, k.floor)
		t.boundedIn(bounds, k)
		if len(namespaces) == 0 {
			return nil
		}
		got, err = t.counts(`SELECT limit_kind, limit_name, limit_n FROM `+fmt.Sprintf(t.H.Dialect.LimitRoom(), "?", "?", "NULL"), namespaces, wait)
		t.limitLocked = true
	} else {
		in, args := t.TextIn("namespace", namespaces)
		got, err = t.counts(fmt.Sprintf(namespaceCounts, in), append(args, args...)...)
	}
	if err != nil {
		return fmt.Errorf("count running steps and tasks in namespaces with limits: %w", err)
	}
	t.limitsIn(namespaces, got, k)
	return nil
}

// limitsIn takes what LimitRoom (or namespaceCounts) read of namespaces
// into k, keeps its counts as the handle's anchors, and notes the
// namespaces the claim holds, whose totals its claim statement adds to.
func (t *ClaimTx) limitsIn(namespaces []string, got []countRow, k *KeyRoom) {
	k.countedIn(namespaces, got)
	if t.H.Dialect.LimitRoom() == "" {
		return
	}
	t.Plan.bounds.counted(namespaces, k.counted, k.version, t.Now)
	for _, ns := range namespaces {
		if !k.counted[ns].missed {
			t.hold(ns)
		}
	}
}

// countedIn takes the rows of a count of namespaces into k.
func (k *KeyRoom) countedIn(namespaces []string, got []countRow) {
	for _, ns := range namespaces {
		k.counted[ns] = nsCount{}
	}
	for _, r := range got {
		n := k.counted[r.key]
		switch r.kind {
		case -1: // a lock another claim holds: the limits are taken as full
			n.missed = true
		case 0:
			n.steps = int(r.n)
		case 4:
			n.tasks = int(r.n)
		case 8:
			n.stepsTotal, n.exact = r.n, true
		case 9:
			n.tasksTotal = r.n
		}
		k.counted[r.key] = n
	}
}

// countExact counts what runs under each key of steps and tasks (with
// their limits), the keys their namespace's bound did not settle, and
// reads which of the tasks in pending have not started. Their namespaces
// are locked (or one writer at a time): a plain statement sees every claim
// committed before.
func (t *ClaimTx) countExact(steps, tasks map[nsKey]int, pending []int64, k *KeyRoom) error {
	keysOf := func(m map[nsKey]int) []string {
		var out []string
		for x := range m {
			if !slices.Contains(out, x.key) {
				out = append(out, x.key)
			}
		}
		sort.Strings(out)
		return out
	}
	var parts []string
	var args []any
	if len(steps) > 0 {
		in, inArgs := t.TextIn("limit_key", keysOf(steps))
		parts = append(parts, `SELECT 1, namespace, limit_key, count(*) FROM steps WHERE state = 'running' AND limit_key != '' AND `+in+` GROUP BY namespace, limit_key`)
		args = append(args, inArgs...)
	}
	if len(tasks) > 0 {
		in, inArgs := t.TextIn("limit_key", keysOf(tasks))
		parts = append(parts, `SELECT 2, namespace, limit_key, count(*) FROM tasks WHERE state = 'running' AND limit_key != '' AND `+in+` GROUP BY namespace, limit_key`)
		args = append(args, inArgs...)
	}
	if len(pending) > 0 {
		// By primary key: (state || '') keeps the planner off the state
		// index, which would read every pending task.
		in, inArgs := t.IDIn("id", pending)
		parts = append(parts, `SELECT 3, '', '', id FROM tasks WHERE `+in+` AND (state || '') = 'pending'`)
		args = append(args, inArgs...)
	}
	rows, err := t.Query(strings.Join(parts, " UNION ALL "), args...)
	if err != nil {
		return fmt.Errorf("count running steps and tasks under limits: %w", err)
	}
	type keyCount struct {
		kind int
		key  nsKey
		n    int64
	}
	got, err := sqldb.Collect(rows, func(r sqldb.Row) (keyCount, error) {
		var c keyCount
		err := r.Scan(&c.kind, &c.key.ns, &c.key.key, &c.n)
		return c, err
	})
	if err != nil {
		return fmt.Errorf("count running steps and tasks under limits: %w", err)
	}
	for sk, n := range steps {
		k.step[sk] = n
	}
	for tk, n := range tasks {
		k.task[tk] = n
	}
	for _, c := range got {
		_, isStep := steps[c.key]
		_, isTask := tasks[c.key]
		switch {
		case c.kind == 1 && isStep:
			k.step[c.key] -= int(c.n)
		case c.kind == 2 && isTask:
			k.task[c.key] -= int(c.n)
		case c.kind == 3:
			k.pending[c.n] = true
		}
	}
	return nil
}

// countRow is one row of a count: a kind (-1 a lock not taken, 0 running
// steps, 4 running tasks under a workflow limit, counted or bounded; 8
// and 9 the totals of steps and tasks read with a count, limitbounds.go),
// a namespace and a number.
type countRow struct {
	kind int
	key  string
	n    int64
}

func (t *ClaimTx) counts(q string, args ...any) ([]countRow, error) {
	rows, err := t.Query(q, args...)
	if err != nil {
		return nil, err
	}
	return sqldb.Collect(rows, func(r sqldb.Row) (countRow, error) {
		var c countRow
		err := r.Scan(&c.kind, &c.key, &c.n)
		return c, err
	})
}

// namespaceLimits skips the namespaces at their concurrency limit.
type namespaceLimits struct{}

func (namespaceLimits) exclude(q string, args []any, _ *policySet, keys *KeyRoom) (string, []any) {
	if keys == nil {
		return q, args
	}
	return andIn(q, args, `namespace NOT IN`, full(keys.ns))
}

// stepKeyLimits skips the steps whose concurrency key is full.
type stepKeyLimits struct{}

func (stepKeyLimits) exclude(q string, args []any, _ *policySet, keys *KeyRoom) (string, []any) {
	if keys == nil {
		return q, args
	}
	return andIn(q, args, `limit_key NOT IN`, fullKeys(keys.step))
}

// workflowLimits: a full workflow limit holds back the tasks that have not
// started; the running ones (no more than the limit) go on.
type workflowLimits struct{}

func (workflowLimits) exclude(q string, args []any, _ *policySet, keys *KeyRoom) (string, []any) {
	if keys == nil {
		return q, args
	}
	if tasks := fullKeys(keys.task); len(tasks) > 0 {
		ph := sqltx.Placeholders(len(tasks))
		q += ` AND (task_limit_key NOT IN (` + ph + `) OR task_id IN (SELECT id FROM tasks WHERE state = 'running' AND limit_key IN (` + ph + `)))`
		for range 2 {
			for _, k := range tasks {
				args = append(args, k)
			}
		}
	}
	return q, args
}
