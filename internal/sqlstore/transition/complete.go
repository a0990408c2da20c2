package transition

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	"github.com/weftrun/weft/internal/sqlstore/claim"
	"github.com/weftrun/weft/internal/sqlstore/sqldb"
	"github.com/weftrun/weft/internal/sqlstore/sqltx"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// This file records outcomes: each guarded by its fence, plain ones in bulk,
// the rest one at a time; cascade.go carries their ends to tasks and
// children.

// EngineOf is the engine of a batch of outcomes: its first's.
func EngineOf(outcomes []store.Outcome) string {
	if len(outcomes) > 0 {
		return outcomes[0].EngineID
	}
	return ""
}

// Record records outcomes in transaction t, returning each one's fate (nil,
// or stale).
func (t *outcomeTx) Record(outcomes []store.Outcome) ([]error, error) {
	results := make([]error, len(outcomes))
	engine := EngineOf(outcomes)
	// Record in step order: engines completing steps of the same tasks
	// then lock their rows in the same order and cannot deadlock.
	order := make([]int, len(outcomes))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool { return outcomes[order[a]].Fence.StepID < outcomes[order[b]].Fence.StepID })
	// Plain outcomes of one engine go together; the rest one by one.
	plainAt := make([]int, 0, len(outcomes))
	var rest []int
	for _, i := range order {
		if o := &outcomes[i]; plainOutcome(o) && o.EngineID == engine {
			plainAt = append(plainAt, i)
		} else {
			rest = append(rest, i)
		}
	}
	held, err := t.finishMany(outcomes, plainAt)
	if err != nil {
		return nil, err
	}
	for j, i := range plainAt {
		if !held[j] {
			results[i] = fmt.Errorf("step %d attempt %d: %w", outcomes[i].Fence.StepID, outcomes[i].Fence.Attempt, store.ErrStaleLease)
		}
	}
	for _, i := range rest {
		o := outcomes[i]
		t.Engine = o.EngineID
		ok, err := t.Finish(o)
		if err != nil {
			return nil, err
		}
		if !ok {
			results[i] = fmt.Errorf("step %d attempt %d: %w", o.Fence.StepID, o.Fence.Attempt, store.ErrStaleLease)
		}
	}
	return results, nil
}

// Finish records one outcome guarded by its fence; false means stale.
func (t *outcomeTx) Finish(o store.Outcome) (bool, error) {
	if len(o.Calls) > 0 {
		if o.State != state.StepWaiting {
			return false, store.Refused(fmt.Errorf("an outcome with calls must wait for them, not be %q", o.State))
		}
		return t.waitForCalls(o)
	}
	if o.BeginWait {
		if o.State != state.StepWaiting {
			return false, store.Refused(fmt.Errorf("an outcome that begins a signal wait must wait, not be %q", o.State))
		}
		return t.waitClaimed(o)
	}
	var result any
	if len(o.Result) > 0 {
		result = string(o.Result)
	}
	to, set, args := o.State, "", []any(nil)
	switch o.State {
	case state.StepCompleted, state.StepFailed:
		set, args = `sub = '', result = ?, error = ?, finished_at = ?`, []any{result, o.Error, t.Now}
		if o.Reason == "" {
			o.Reason = o.Error
		}
	case state.StepSkipped:
		// Skipped by its when condition before its handler ran: the
		// claim gives its attempt back, so a step that never ran shows
		// none.
		set, args = `sub = '', error = '', finished_at = ?, attempt = attempt - 1`, []any{t.Now}
	case state.StepWaiting, state.StepReady:
		runAt := o.RunAt.UnixMicro()
		to = state.StepWaiting
		if o.RunAt.IsZero() || runAt <= t.Now {
			to, runAt = state.StepReady, t.Now
		}
		give := 0
		if o.Snooze {
			give = 1
		}
		set = `sub = '', error = ?, attempt = attempt - ?, run_at = ?, sort_key = ? - priority * ?, checkpoint = COALESCE(?, checkpoint)`
		args = []any{o.Error, give, sqltx.NullIf(to == state.StepWaiting, runAt), runAt, t.H.Aging, result}
	default:
		return false, store.Refused(fmt.Errorf("outcome state %q is not completed, failed or waiting", o.State))
	}
	if err := state.CheckStep(state.StepRunning, to); err != nil {
		return false, store.Refused(err)
	}
	if o.Child != nil && o.State == state.StepWaiting {
		held, refused, err := t.startChild(o)
		if err != nil || refused == "" {
			return held, err
		}
		o.Child, to, o.Error, o.Reason, o.Result = nil, state.StepFailed, refused, refused, nil
		set, args = `sub = '', result = NULL, error = ?, finished_at = ?`, []any{refused, t.Now}
	}
	if o.ChildConsumed {
		set += `, child_error = NULL`
	}
	if o.Spawn != nil && o.State == state.StepCompleted {
		if msg, err := t.spawnTooLarge(o.Fence.StepID, o.Spawn); err != nil {
			return false, err
		} else if msg != "" {
			o.Spawn, to, o.Error, o.Reason, o.Result = nil, state.StepFailed, msg, msg, nil
			set, args = `sub = '', result = NULL, error = ?, finished_at = ?`, []any{msg, t.Now}
		}
	}
	// One fenced compare-and-swap: the step must still be running under
	// exactly this attempt and lease.
	var taskID int64
	var name, children string
	var bk claim.BreakerHit
	brk, scanned := bk.Dest()
	err := t.QueryRow(`UPDATE steps SET state = ?, deadline = NULL, `+set+` WHERE id = ? AND state = 'running' AND attempt = ? AND lease_id = ?
		RETURNING task_id, name, children, `+claim.BreakerReturning, append(append([]any{string(to)}, args...), o.Fence.StepID, o.Fence.Attempt, o.Fence.LeaseID)...).
		Scan(append([]any{&taskID, &name, &children}, brk...)...)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("record outcome of step %d: %w", o.Fence.StepID, err)
	}
	scanned()
	t.AuditRunEnd(o.Fence.StepID, taskID, name, to, o.Fence.Attempt, o.Reason)
	t.breakerHit(bk, o.Fence.StepID, taskID, name, o, to)
	switch to {
	case state.StepReady:
		t.MadeReady(o.Fence.StepID)
	case state.StepCompleted, state.StepFailed, state.StepSkipped:
		if err := t.dynamicOutcome(o, taskID, name, children, to); err != nil {
			return false, err
		}
		if err := t.StepEnded(taskID, name, children, to, o.Error); err != nil {
			return false, err
		}
		if o.Resume != nil && to == state.StepCompleted {
			return true, t.resume(taskID, o.Fence.LeaseID, o.Resume)
		}
		return true, nil
	}
	return true, nil
}

// plainOutcome reports whether an outcome only ends its step: completed or
// failed, with no decision to apply and no items to spawn. A batch of those
// is recorded with a few set-based statements instead of a few per step.
func plainOutcome(o *store.Outcome) bool {
	return (o.State == state.StepCompleted || o.State == state.StepFailed) && !o.Decide && o.Spawn == nil && o.Child == nil && !o.ChildConsumed &&
		len(o.Calls) == 0 && o.Resume == nil && !o.BeginWait
}

// finishMany records the plain outcomes of all at indexes at in one fenced
// update and accounts for their tasks together. It reports which of them
// still held their fence, in the order of at.
func (t *outcomeTx) finishMany(all []store.Outcome, at []int) ([]bool, error) {
	held := make([]bool, len(at))
	if len(at) == 0 {
		return held, nil
	}
	o := func(j int) *store.Outcome { return &all[at[j]] }
	byStep := make(map[int64]int, len(at))
	for j := range at {
		byStep[o(j).Fence.StepID] = j
	}
	// The fence: each step must still be running under exactly its attempt
	// and lease. By primary key: (state || '') keeps the planner off
	// steps_running, whose entries of steps that ended since the last
	// vacuum a bitmap scan would read at every batch (9,000 of them for 26
	// rows, 1.9 ms, in a burn-down).
	const returning = `RETURNING id, task_id, name, children, ` + claim.BreakerReturning + `, claim_audited, COALESCE(started_at, 0), lease_id, idx, engine_id, kind`
	var update string
	var args []any
	if t.ByParams(len(at)) {
		one := o(0)
		update = `UPDATE steps SET state = ?, sub = '', result = ?, error = ?, finished_at = ?, deadline = NULL
			WHERE id = ? AND (state || '') = 'running' AND attempt = ? AND lease_id = ? ` + returning
		args = []any{string(one.State), claim.ResultText(one.Result), one.Error, t.Now, one.Fence.StepID, int64(one.Fence.Attempt), one.Fence.LeaseID}
	} else {
		from, rowArgs := sqltx.Rowset(t.SQL(), "o", at,
			sqltx.IntCol("o_id", func(i *int) int64 { return all[*i].Fence.StepID }),
			sqltx.IntCol("o_attempt", func(i *int) int64 { return int64(all[*i].Fence.Attempt) }),
			sqltx.IntCol("o_lease", func(i *int) int64 { return all[*i].Fence.LeaseID }),
			sqltx.TextCol("o_state", func(i *int) string { return string(all[*i].State) }),
			sqltx.JSONCol("o_result", func(i *int) json.RawMessage {
				if len(all[*i].Result) == 0 {
					return nil
				}
				return all[*i].Result
			}),
			sqltx.TextCol("o_error", func(i *int) string { return all[*i].Error }))
		update = `UPDATE steps SET state = o.o_state, sub = '', result = o.o_result, error = o.o_error, finished_at = ?, deadline = NULL
			FROM ` + from + `
			WHERE steps.id = o.o_id AND (steps.state || '') = 'running' AND steps.attempt = o.o_attempt AND steps.lease_id = o.o_lease ` + returning
		args = append([]any{t.Now}, rowArgs...)
	}
	// Where a statement's WITH may write, the same statement reads and
	// locks the steps' tasks, in id order (stepsEnded's order): one round
	// trip fewer.
	withTasks := t.H.Dialect.WithWrites() && t.H.Dialect.ClaimLock() != ""
	if withTasks {
		update = `WITH s AS (` + update + `)
			SELECT s.*, ` + taskAccountOfTasks + ` FROM s JOIN tasks ON tasks.id = s.task_id
			ORDER BY tasks.id, s.id FOR UPDATE OF tasks`
	}
	q, err := t.Query(update, args...)
	if err != nil {
		return nil, fmt.Errorf("record outcomes: %w", err)
	}
	type recorded struct {
		id int64
		endedStep
		breaker claim.BreakerHit
		task    taskAccount
		claim   sqltx.StepClaim
		kind    string
	}
	// One set of scan destinations for every row.
	var v recorded
	brk, scanned := v.breaker.Dest()
	dest := append([]any{&v.id, &v.taskID, &v.name, &v.children}, brk...)
	c := &v.claim
	dest = append(dest, &c.Audited, &c.StartedAt, &c.LeaseID, &c.Idx, &c.Engine, &v.kind)
	if withTasks {
		dest = append(dest, v.task.dest()...)
	}
	// Each row is taken in as it is read: what the claims need once the
	// tasks are read is kept (claimOf), not the row (350 bytes a step).
	type claimOf struct {
		id, taskID int64
		claim      sqltx.StepClaim
		end        int // the run's end in the audit queue
	}
	ended := make([]endedStep, 0, len(at))
	claims := make([]claimOf, 0, len(at))
	var tasks []taskAccount
	if withTasks {
		tasks = make([]taskAccount, 0, len(at))
	}
	t.AuditRoom(len(at))
	err = sqldb.Each(q, func(r sqldb.Row) error {
		v = recorded{}
		if err := r.Scan(dest...); err != nil {
			return err
		}
		scanned()
		k := byStep[v.id]
		held[k] = true
		oc := o(k)
		e := v.endedStep
		e.st, e.err = oc.State, oc.Error
		ended = append(ended, e)
		reason := oc.Reason
		if reason == "" {
			reason = oc.Error
		}
		t.AuditRunEnd(v.id, e.taskID, e.name, e.st, oc.Fence.Attempt, reason)
		claims = append(claims, claimOf{id: v.id, taskID: e.taskID, claim: v.claim, end: len(t.Audits) - 1})
		if e.children != "" { // a dependency of others
			t.ranHere(e.taskID, v.claim.Idx, claim.DepResult{Name: e.name, Kind: v.kind, Idx: int(v.claim.Idx), Result: claim.ResultText(oc.Result)})
		}
		t.breakerHit(v.breaker, v.id, e.taskID, e.name, *oc, e.st)
		if withTasks && (len(tasks) == 0 || tasks[len(tasks)-1].id != v.task.id) {
			tasks = append(tasks, v.task)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("record outcomes: %w", err)
	}
	if len(ended) == 0 {
		return held, nil
	}
	if !withTasks {
		var err error
		if tasks, err = t.endedTasks(ended); err != nil {
			return nil, err
		}
	}
	// Each run's claim, read with its end and its task.
	byTask := make(map[int64]*taskAccount, len(tasks))
	for k := range tasks {
		byTask[tasks[k].id] = &tasks[k]
	}
	for _, c := range claims {
		if task := byTask[c.taskID]; task != nil && t.Audits[c.end].StepID == c.id {
			r := &t.Audits[c.end]
			r.Claim, r.ClaimRead = runClaimOf(c.claim, r.Attempt, task), true
		}
	}
	return held, t.accountEnded(ended, tasks)
}

// ranHere keeps the result of a run this transaction recorded (a step of
// task at idx ended), as a dependency's result of the steps it may claim
// after: a chain's next step, a join whose dependencies ended together.
func (t *outcomeTx) ranHere(task, idx int64, r claim.DepResult) {
	if t.claim.Ran == nil {
		t.claim.Ran = map[claim.StepAt]claim.DepResult{}
	}
	t.claim.Ran[claim.StepAt{Task: task, Idx: idx}] = r
}

// readTask keeps the handlers' part of task id, started before and read in
// this transaction, for the steps of it the transaction claims after
// (startTasks): a task's input, workflow, version and trace context never
// change.
func (t *outcomeTx) readTask(id int64, ct claim.ClaimedTask) {
	if t.claim.Started == nil {
		t.claim.Started = map[int64]claim.ClaimedTask{}
	}
	t.claim.Started[id] = ct
}
