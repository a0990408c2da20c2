package transition

import (
	"database/sql"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/weftrun/weft/internal/dag"
	"github.com/weftrun/weft/internal/sqlstore/claim"
	"github.com/weftrun/weft/internal/sqlstore/sqldb"
	"github.com/weftrun/weft/internal/sqlstore/sqltx"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// This file carries the end of a step to the rest of its task in the same
// transaction: the task's counts and its own end, and the readiness of the
// step's children under their trigger rules.

// eligible moves a step whose dependencies are satisfied to ready, or to
// waiting when runAt is in the future. locked: this transaction holds the
// step's row in state from (MoveLockedStep).
func (t *outcomeTx) eligible(id, taskID int64, name string, from state.Step, locked bool, priority int, ttl, runAt int64, reason string) error {
	var expires any
	if ttl > 0 {
		expires = max(runAt, t.Now) + ttl
	}
	to, set, args := state.StepReady, `sort_key = ?, run_at = NULL, expires_at = ?`, []any{t.Now - int64(priority)*t.H.Aging, expires}
	if runAt > t.Now {
		to, set, args = state.StepWaiting, `run_at = ?, expires_at = ?`, []any{runAt, expires}
	}
	ok := true
	var err error
	if locked {
		err = t.MoveLockedStep(id, taskID, name, from, to, 0, reason, set, args...)
	} else {
		ok, err = t.MoveStep(id, taskID, name, from, to, 0, reason, set, args...)
	}
	if ok && err == nil && to == state.StepReady {
		t.MadeReady(id)
	}
	return err
}

// parentsEnded tells the pending children of ended steps: their
// dependency counts grow in one statement, and each child's trigger rule
// is applied as if its parents had ended one at a time, in the order of
// ended (a decided rule stays decided, dag.Decide), so that a skip names
// the parent that decided it.
func (t *outcomeTx) parentsEnded(ended []endedStep) error {
	type key struct {
		task int64
		idx  int
	}
	type parent struct {
		name string
		st   state.Step
	}
	type child struct {
		add     dag.Counts // the batch's ends (Total unused)
		parents []parent
	}
	var order []key
	children := map[key]*child{}
	for _, e := range ended {
		for _, idx := range sqltx.ParseIdx(e.children) {
			k := key{e.taskID, idx}
			c := children[k]
			if c == nil {
				c = &child{}
				children[k] = c
				order = append(order, k)
			}
			counted(&c.add, e.st)
			c.parents = append(c.parents, parent{e.name, e.st})
		}
	}
	if len(order) == 0 {
		return nil
	}
	const returning = ` RETURNING task_id, idx, id, name, deps, children, deps_ok, deps_failed, deps_skipped, priority, ttl, trigger_rule, deps_extra, state`
	// A pending child, or a durable function's step waiting for its calls
	// (calls.go).
	const waitsForParents = `(state = 'pending' OR (state = 'waiting' AND kind = '` + store.KindFunction + `'))`
	var q sqldb.Rows
	var err error
	if len(order) == 1 {
		// One child (a chain): by parameters, which SQLite runs faster
		// than a rowset of one.
		k, c := order[0], children[order[0]]
		q, err = t.Query(`UPDATE steps SET deps_ok = deps_ok + ?, deps_failed = deps_failed + ?, deps_skipped = deps_skipped + ?
			WHERE task_id = ? AND idx = ? AND `+waitsForParents+returning, c.add.Succeeded, c.add.Failed, c.add.Skipped, k.task, k.idx)
	} else {
		type added struct {
			task, idx int64
			add       dag.Counts
		}
		rows := make([]added, len(order))
		for i, k := range order {
			rows[i] = added{k.task, int64(k.idx), children[k].add}
		}
		from, args := sqltx.Rowset(t.SQL(), "p", rows,
			sqltx.IntCol("p_task", func(r *added) int64 { return r.task }),
			sqltx.IntCol("p_idx", func(r *added) int64 { return r.idx }),
			sqltx.IntCol("p_ok", func(r *added) int64 { return int64(r.add.Succeeded) }),
			sqltx.IntCol("p_failed", func(r *added) int64 { return int64(r.add.Failed) }),
			sqltx.IntCol("p_skipped", func(r *added) int64 { return int64(r.add.Skipped) }))
		q, err = t.Query(`UPDATE steps SET deps_ok = deps_ok + p.p_ok, deps_failed = deps_failed + p.p_failed, deps_skipped = deps_skipped + p.p_skipped
			FROM `+from+` WHERE steps.task_id = p.p_task AND steps.idx = p.p_idx AND `+strings.ReplaceAll(waitsForParents, "state", "steps.state")+returning, args...)
	}
	if err != nil {
		return fmt.Errorf("update dependents: %w", err)
	}
	type pending struct {
		id                   int64
		name, deps, children string
		c                    dag.Counts
		priority, extra      int
		ttl                  int64
		rule                 string
		st                   state.Step
	}
	got := map[key]pending{}
	var k key
	var r pending
	dest := []any{&k.task, &k.idx, &r.id, &r.name, &r.deps, &r.children, &r.c.Succeeded, &r.c.Failed, &r.c.Skipped, &r.priority, &r.ttl,
		&r.rule, &r.extra, &r.st}
	if _, err := sqldb.Collect(q, func(row sqldb.Row) (struct{}, error) {
		if err := row.Scan(dest...); err != nil {
			return struct{}{}, err
		}
		got[k] = r
		return struct{}{}, nil
	}); err != nil {
		return fmt.Errorf("update dependents: %w", err)
	}
	// Children no longer pending (cancelled or already decided) did not
	// change.
	for _, k := range order {
		r, ok := got[k]
		if !ok {
			continue
		}
		c := children[k]
		// The counts before this batch, then each parent's end in turn.
		n := dag.Counts{Total: len(sqltx.ParseIdx(r.deps)) + r.extra, Succeeded: r.c.Succeeded - c.add.Succeeded,
			Failed: r.c.Failed - c.add.Failed, Skipped: r.c.Skipped - c.add.Skipped}
		rule := dag.Rule(r.rule)
		if r.st == state.StepWaiting {
			rule = dag.AllDone // a function step waits for every call, however it ended
		}
		decision, by := dag.Wait, parent{}
		for _, p := range c.parents {
			counted(&n, p.st)
			if decision = dag.Decide(rule, n); decision != dag.Wait {
				by = p
				break
			}
		}
		if r.st == state.StepWaiting {
			// A function step whose calls all ended runs again.
			if decision == dag.Run {
				if err := t.eligible(r.id, k.task, r.name, state.StepWaiting, true, r.priority, 0, 0, "its calls ended"); err != nil {
					return err
				}
			}
			continue
		}
		if err := t.decideChild(k.task, r.id, r.name, r.children, decision, by.name, by.st, r.rule,
			r.priority, r.ttl); err != nil {
			return err
		}
	}
	return nil
}

// counted adds a dependency that ended st to c.
func counted(c *dag.Counts, st state.Step) {
	switch {
	case st.Succeeded():
		c.Succeeded++
	case st == state.StepSkipped:
		c.Skipped++
	default:
		c.Failed++
	}
}

// decideChild applies decision to a pending child whose parent parentName
// ended parentState and decided it.
func (t *outcomeTx) decideChild(taskID, id int64, name, children string, decision dag.Decision, parentName string, parentState state.Step,
	rule string, priority int, ttl int64) error {
	switch decision {
	case dag.Run:
		// Its row, locked by the update above, is pending. A signal step
		// too: its claim begins its wait.
		return t.eligible(id, taskID, name, state.StepPending, true, priority, ttl, 0, "dependencies satisfied")
	case dag.Skip:
		reason := fmt.Sprintf("dependency %q %s", parentName, parentState)
		if rule != "" && rule != string(dag.AllSuccess) {
			reason = fmt.Sprintf("trigger rule %s is false (dependency %q %s)", rule, parentName, parentState)
		}
		moved, err := t.MoveStep(id, taskID, name, state.StepPending, state.StepSkipped, 0, reason, `finished_at = ?`, t.Now)
		if err != nil || !moved {
			return err
		}
		return t.StepEnded(taskID, name, children, state.StepSkipped, "")
	}
	return nil
}

// endedStep is a step that reached a terminal state: its task accounts for
// it and its children learn of it.
type endedStep struct {
	taskID         int64
	name, children string
	st             state.Step
	err            string
}

// StepEnded accounts for one step that reached a terminal state.
func (t *outcomeTx) StepEnded(taskID int64, name string, children string, st state.Step, errMsg string) error {
	return t.stepsEnded([]endedStep{{taskID: taskID, name: name, children: children, st: st, err: errMsg}})
}

// stepsEnded accounts for steps that reached a terminal state: their tasks
// are read (and locked, on PostgreSQL) in one statement and accounted for
// (accountEnded).
func (t *outcomeTx) stepsEnded(ended []endedStep) error {
	if len(ended) == 0 {
		return nil
	}
	current, err := t.endedTasks(ended)
	if err != nil {
		return err
	}
	return t.accountEnded(ended, current)
}

// endedTasks reads and locks the tasks of ended steps, in id order.
func (t *outcomeTx) endedTasks(ended []endedStep) ([]taskAccount, error) {
	seen := make(map[int64]bool, len(ended))
	var ids []int64
	for _, e := range ended {
		if !seen[e.taskID] {
			seen[e.taskID] = true
			ids = append(ids, e.taskID)
		}
	}
	// Tasks in id order, so engines finishing steps of the same tasks take
	// their row locks in the same order. Locked, what is read stays true
	// until this transaction ends (SQLite has one writer).
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	in, inArgs := t.IDIn("id", ids)
	lock := ""
	if t.H.Dialect.ClaimLock() != "" {
		lock = " FOR UPDATE"
	}
	// Where children of these steps may be claimed next in this
	// transaction, the handlers' part of their tasks comes too
	// (startTasks takes it from there).
	withContext := !t.H.Dialect.WithWrites() && slices.ContainsFunc(ended, func(e endedStep) bool { return e.children != "" })
	cols := taskAccountColumns
	if withContext {
		cols += `, ` + claim.ClaimedTaskColumns
	}
	rows, err := t.Query(`SELECT `+cols+` FROM tasks WHERE `+in+` ORDER BY id`+lock, inArgs...)
	if err != nil {
		return nil, fmt.Errorf("read tasks of ended steps: %w", err)
	}
	current, err := sqldb.Collect(rows, func(r sqldb.Row) (taskAccount, error) {
		var c taskAccount
		if !withContext {
			return c, r.Scan(c.dest()...)
		}
		var ct claim.ClaimedTask
		if err := r.Scan(append(c.dest(), ct.Dest()...)...); err != nil {
			return c, err
		}
		if c.st != state.TaskPending {
			t.readTask(c.id, ct)
		}
		return c, nil
	})
	if err != nil {
		return nil, fmt.Errorf("read tasks of ended steps: %w", err)
	}
	return current, nil
}

// taskAccountColumns are the columns of a task that accountEnded reads, in
// taskAccount.dest's order, and those that tell whether a claim started it
// (StepClaim).
const taskAccountColumns = `id, state, remaining, failed, error, parent_step_id, start_lease, start_step, started_at`

// taskAccountOfTasks is taskAccountColumns of the table tasks, for a
// statement that reads them joined to others.
var taskAccountOfTasks = sqltx.Qualify("tasks", taskAccountColumns)

// taskAccount is what accountEnded reads of a task.
type taskAccount struct {
	id                int64
	st                state.Task
	remaining, failed int64
	err               string
	parent            sql.NullInt64
	// the claim that started the task: its lease, the index of its first
	// step it took, when (StepClaim)
	startLease, startStep int64
	startedAt             sql.NullInt64
}

// dest returns where to scan taskAccountColumns.
func (c *taskAccount) dest() []any {
	return []any{&c.id, (*string)(&c.st), &c.remaining, &c.failed, &c.err, &c.parent, &c.startLease, &c.startStep, &c.startedAt}
}

// accountEnded writes the counts of the tasks of ended steps and, for
// those whose steps have all ended, their own end, given their rows read
// and locked in id order (current); then the children of every step learn
// of it.
func (t *outcomeTx) accountEnded(ended []endedStep, current []taskAccount) error {
	type account struct {
		n, failed int64
		err       string
	}
	accounts := make(map[int64]account, len(current))
	for _, e := range ended {
		a := accounts[e.taskID]
		a.n++
		if e.st == state.StepFailed || e.st == state.StepExpired {
			a.failed++
			if a.err == "" {
				a.err = fmt.Sprintf("step %q %s", e.name, e.st)
				if e.err != "" {
					a.err += ": " + e.err
				}
			}
		}
		accounts[e.taskID] = a
	}
	// Each task's new counts and, once nothing remains of a task that has
	// not ended otherwise, its end: one row each for one statement.
	type done struct {
		c      taskAccount
		to     state.Task
		reason string
	}
	type update struct {
		c   taskAccount
		to  state.Task
		end int64
	}
	finished := make([]done, 0, len(current))
	updates := make([]update, len(current))
	for i, c := range current {
		a := accounts[c.id]
		c.remaining -= a.n
		c.failed += a.failed
		if c.err == "" {
			c.err = a.err
		}
		to, end := c.st, int64(0)
		if c.remaining == 0 && !c.st.Terminal() {
			d := done{c: c, to: state.TaskCompleted, reason: "every step finished"}
			if c.failed > 0 {
				d.to, d.reason = state.TaskFailed, c.err
				if d.reason == "" {
					d.reason = "a step failed"
				}
			}
			if err := state.CheckTask(c.st, d.to); err != nil {
				return fmt.Errorf("task %d: %w", c.id, err)
			}
			finished = append(finished, d)
			to, end = d.to, 1
		}
		updates[i] = update{c, to, end}
	}
	// Nothing reads what it returns: it goes with the next statement.
	if t.ByParams(len(updates)) {
		u := updates[0]
		if err := t.Soon("account ended steps", `UPDATE tasks SET remaining = ?, failed = ?, error = ?, state = ?,
			finished_at = CASE WHEN ? = 1 THEN ? ELSE finished_at END WHERE id = ?`,
			u.c.remaining, u.c.failed, u.c.err, string(u.to), u.end, t.Now, u.c.id); err != nil {
			return err
		}
	} else {
		from, args := sqltx.Rowset(t.SQL(), "a", updates,
			sqltx.IntCol("a_id", func(u *update) int64 { return u.c.id }),
			sqltx.IntCol("a_remaining", func(u *update) int64 { return u.c.remaining }),
			sqltx.IntCol("a_failed", func(u *update) int64 { return u.c.failed }),
			sqltx.TextCol("a_err", func(u *update) string { return u.c.err }),
			sqltx.TextCol("a_state", func(u *update) string { return string(u.to) }),
			sqltx.IntCol("a_end", func(u *update) int64 { return u.end }))
		if err := t.Soon("account ended steps", `UPDATE tasks SET remaining = a.a_remaining, failed = a.a_failed, error = a.a_err, state = a.a_state,
			finished_at = CASE WHEN a.a_end = 1 THEN ? ELSE finished_at END
			FROM `+from+` WHERE tasks.id = a.a_id`, append([]any{t.Now}, args...)...); err != nil {
			return err
		}
	}
	for _, d := range finished {
		t.Audit(d.c.id, "", string(d.c.st), string(d.to), 0, d.reason)
	}
	// A child's end reaches the step of its parent that waits for it.
	for _, d := range finished {
		if d.c.parent.Valid {
			if err := t.childEnded(d.c.id, d.c.parent.Int64, d.to, d.reason); err != nil {
				return err
			}
		}
	}
	return t.parentsEnded(ended)
}

// EndTask moves a task to a terminal state and every non-terminal step of it
// to stepTo, cancels its unfinished children and tells the step of its
// parent that waits for it, returning the fences of steps that were running
// (its own and its children's).
func (t *outcomeTx) EndTask(id int64, from, to state.Task, stepTo state.Step, reason string) ([]store.Fence, error) {
	ok, err := t.MoveTask(id, from, to, reason, `finished_at = ?, remaining = 0`, t.Now)
	if err != nil || !ok {
		return nil, err
	}
	rows, err := t.Query(`SELECT id, name, state, attempt, lease_id FROM steps
		WHERE task_id = ? AND state IN ('pending', 'ready', 'running', 'waiting')`, id)
	if err != nil {
		return nil, fmt.Errorf("steps of task %d: %w", id, err)
	}
	type open struct {
		fence    store.Fence
		name, st string
	}
	steps, err := sqldb.Collect(rows, func(r sqldb.Row) (open, error) {
		var o open
		err := r.Scan(&o.fence.StepID, &o.name, &o.st, &o.fence.Attempt, &o.fence.LeaseID)
		return o, err
	})
	if err != nil {
		return nil, fmt.Errorf("steps of task %d: %w", id, err)
	}
	var running []store.Fence
	for _, o := range steps {
		if _, err := t.MoveStep(o.fence.StepID, id, o.name, state.Step(o.st), stepTo, o.fence.Attempt, reason,
			`sub = '', finished_at = ?, expires_at = NULL, deadline = NULL`, t.Now); err != nil {
			return nil, err
		}
		if state.Step(o.st) == state.StepRunning {
			running = append(running, o.fence)
		}
	}
	// Its unfinished children have nobody to report to: they end too.
	fences, err := t.cancelChildren(id, string(to))
	if err != nil {
		return nil, err
	}
	running = append(running, fences...)
	var parentStep sql.NullInt64
	if err := t.QueryRow(`SELECT parent_step_id FROM tasks WHERE id = ?`, id).Scan(&parentStep); err != nil {
		return nil, fmt.Errorf("parent of task %d: %w", id, err)
	}
	if parentStep.Valid {
		if err := t.childEnded(id, parentStep.Int64, to, reason); err != nil {
			return nil, err
		}
	}
	return running, nil
}

// dependencyCounts counts how a step's dependencies ended, the items of a
// batch dependency counting among them (items maps a batch step's index to
// its items' indexes); stateOf gives a step's state by index.
func dependencyCounts(deps []int, items map[int][]int, stateOf func(int) state.Step) dag.Counts {
	var c dag.Counts
	for _, d := range deps {
		for _, i := range append([]int{d}, items[d]...) {
			c.Total++
			switch ps := stateOf(i); {
			case ps.Succeeded():
				c.Succeeded++
			case ps == state.StepSkipped:
				c.Skipped++
			case ps.Terminal():
				c.Failed++
			}
		}
	}
	return c
}

// runClaimOf is the claim c of the run that ends attempt, for the audit
// row that ends it, given the step's task as read with it: nil where a row
// records the claim already. The claim started the task as ClaimStarts
// says.
func runClaimOf(c sqltx.StepClaim, attempt int, task *taskAccount) *sqltx.RunClaim {
	if c.Audited != 0 {
		return nil
	}
	starts := task.startLease == c.LeaseID && task.startStep == c.Idx && task.startedAt.Valid && task.startedAt.Int64 == c.StartedAt
	return &sqltx.RunClaim{At: c.StartedAt, Attempt: attempt, Starts: starts, Engine: c.Engine}
}
