package sqlstore

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// This file holds the transaction helper every operation writes through:
// txn, with the audit log and the guarded state changes of tasks and steps.

// txn is one write transaction with the helpers every state change uses: the
// audit log, the eligibility of steps and the cascade to children.
type txn struct {
	ctx     context.Context
	x       Querier
	owned   bool // the store began the transaction (not the caller)
	s       *Store
	now     int64
	engine  string
	readied int
	// readyIDs: where trackReady is set, the steps this transaction made
	// ready that it knows of by id; tookReady: how many of those it made
	// ready a claim in it took (CompleteAndClaim, InsertAndClaim). It
	// wakes the engines only for the others: a breaker that closes, say,
	// counts in readied after the claim (flushBreakers).
	trackReady bool
	readyIDs   []int64
	tookReady  int
	// timed: this transaction wrote a time something falls due (a delayed
	// step, a ttl, a good_until, a schedule's next tick). Engines are told
	// (DueWake, and the notification's payload NotifyDue), so that they
	// read their next due time again: a writer that runs no engine does
	// not otherwise reach them.
	timed bool
	// fairLocked: the claim holds the fair shares' lock (fair.go).
	fairLocked bool
	// limitHeld: the namespaces whose limits the claim counted (holding
	// their locks) or bounded (limitbounds.go), whose totals its claim
	// statements add to; limitTotals: the totals they returned, and
	// limitOwn, what the claim added to them.
	limitHeld             []string
	limitTotals, limitOwn map[string]limitTotals
	// totalsMax: the last namespace, by name, whose row of limit_claims
	// a claim statement of this claim took (once limitTotals has any).
	totalsMax string
	// fairRead: what the claim's first statement read of fairReadiness,
	// for its first round (fair.go).
	fairRead []fairRow
	// fairAlone: the claim's first statement found that no namespace but
	// the one last found alone with ready work has any (fairOthers).
	fairAlone bool
	// boundsChecked: the claim's statement checked the bounds of the
	// limits it claimed under (gateBoundsShut), not the claim.
	boundsChecked bool
	// limitLocked: the claim holds locks of namespaces' limits
	// (limits.go).
	limitLocked bool
	// rateTake is a take of rate tokens the next claim statement makes
	// (rates.go).
	rateTake *optimisticTake
	// ahead: the first round's query of candidates, sent with the claim's
	// first statement (candidatesAhead).
	ahead *aheadQuery
	// started: the handlers' part of tasks started before, read in this
	// transaction (readTask).
	started map[int64]claimedTask
	// ran: the results of the runs this transaction recorded, by task
	// and index, as dependencies' results (ranHere).
	ran map[stepAt]depResult
	// depResults: the results of claimed steps' dependencies, by step,
	// read with their claim statement (claimed.go).
	depResults map[int64][]depResult
	// notifyDeferred: steps became ready but the notification is left to
	// the end of the current window.
	notifyDeferred bool
	// notifyTaken: this transaction opened a window and carries its
	// notification.
	notifyTaken bool
	// audits are written in bulk before the transaction commits.
	audits []auditRow
	// stepArgs is the arguments buffer of insertOne's statements.
	stepArgs []any
	// breakers are outcomes of steps with a circuit breaker, applied
	// before the transaction commits (breakers.go).
	breakers breakerWork
	// lastClaim: the next claim statement ends the transaction
	// (endsWithClaim).
	lastClaim bool
	// committed: the transaction ended with a claim sent with its COMMIT
	// (Pipeliner.FollowLast); what the claim still reads, it reads outside.
	committed bool
	// endedTask: the transaction ended a task (TaskEnded).
	endedTask bool
}

// write runs fn in one write transaction (IMMEDIATE on SQLite).
func (s *Store) write(ctx context.Context, engineID string, fn func(t *txn) error) error {
	ctx, err := s.writeContext(ctx)
	if err != nil {
		return err
	}
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	t := &txn{ctx: ctx, x: tx, owned: true, s: s, now: s.clock().UnixMicro(), engine: engineID}
	err = t.run(fn)
	if err != nil {
		err = s.refused(err)
		tx.Rollback(context.WithoutCancel(ctx))
		if t.notifyTaken {
			// The window's notification was to ride on this transaction;
			// send it when the window ends instead, for those that waited.
			s.scheduleNotify()
		}
		return err
	}
	if err = tx.Commit(ctx); err != nil {
		if t.notifyTaken {
			s.scheduleNotify()
		}
		return fmt.Errorf("commit: %w", s.refused(err))
	}
	s.woke(t)
	if t.notifyDeferred {
		s.scheduleNotify()
	}
	return nil
}

// writeContext is the context a write runs under: where the dialect says
// so (Uncancellable), one that the caller's cancellation does not reach,
// once the write has begun.
func (s *Store) writeContext(ctx context.Context) (context.Context, error) {
	if !s.d.Uncancellable {
		return ctx, nil
	}
	if err := ctx.Err(); err != nil {
		return ctx, err
	}
	return context.WithoutCancel(ctx), nil
}

// refused marks err as store.Refused where the dialect says the database
// refused the statement or its data.
func (s *Store) refused(err error) error {
	if err != nil && s.d.Refused != nil && s.d.Refused(err) {
		return store.Refused(err)
	}
	return err
}

// within runs fn inside a transaction the caller began and will commit or
// roll back. Engines in this process are woken at once (they find the steps
// when the caller commits); other processes hear the notification, which
// PostgreSQL delivers only on commit.
func (s *Store) within(ctx context.Context, q Querier, fn func(t *txn) error) error {
	t := &txn{ctx: ctx, x: q, s: s, now: s.clock().UnixMicro()}
	if err := t.run(fn); err != nil {
		return err
	}
	s.woke(t)
	return nil
}

// woke wakes this handle's engines for what transaction t did: steps made
// ready (Wake), a due time written (DueWake), a task ended (TaskEnded).
func (s *Store) woke(t *txn) {
	if t.leftReady() {
		s.notify()
	}
	if t.timed {
		s.NudgeDue()
	}
	if t.endedTask {
		s.taskEnded()
	}
}

// run applies fn, writes the queued audit rows and, if steps became ready,
// the dialect's notification.
func (t *txn) run(fn func(t *txn) error) error {
	if err := fn(t); err != nil {
		return err
	}
	if err := t.flushBreakers(); err != nil {
		return err
	}
	if err := t.flushAudit(); err != nil {
		return err
	}
	if (t.leftReady() || t.timed) && t.s.d.Notify != "" {
		switch {
		case t.timed:
			// Told at once: a window's later notification says nothing of
			// due times (transactions that write them are few).
		case t.owned:
			if !t.s.takeNotify() {
				t.notifyDeferred = true
				return nil
			}
			t.notifyTaken = true
		}
		// Nothing reads it: it goes with the COMMIT where it can.
		if err := t.soon("notify", t.s.d.Notify, t.s.d.NotifyChannel, t.s.notifyPayload(t.timed, t.owned)); err != nil {
			return err
		}
	}
	return nil
}

// soon runs a statement whose result nobody reads: where the transaction
// pipelines (Pipeliner), ahead of its next statement, in that statement's
// round trip; else now. what says what it does, for its error.
func (t *txn) soon(what, q string, args ...any) error {
	if p, ok := t.x.(Pipeliner); ok {
		p.Queue(Statement{Query: t.s.bind(q), Args: args, What: what})
		return nil
	}
	if _, err := t.exec(q, args...); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

func (t *txn) exec(q string, args ...any) (Result, error) {
	return t.x.Exec(t.ctx, t.s.bind(q), args...)
}

func (t *txn) query(q string, args ...any) (Rows, error) {
	return t.x.Query(t.ctx, t.s.bind(q), args...)
}

func (t *txn) queryRow(q string, args ...any) Row {
	return t.x.QueryRow(t.ctx, t.s.bind(q), args...)
}

// int64s runs a query of one integer column.
func (t *txn) int64s(q string, args ...any) ([]int64, error) {
	rows, err := t.query(q, args...)
	if err != nil {
		return nil, err
	}
	return collect(rows, scanInt64)
}

// strings runs a query of one text column.
func (t *txn) strings(q string, args ...any) ([]string, error) {
	rows, err := t.query(q, args...)
	if err != nil {
		return nil, err
	}
	return collect(rows, scanString)
}

// idIn is the condition "col is one of ids" and its arguments, as one
// parameter whatever the number of ids (an array where the database takes
// arrays, a JSON array elsewhere), so that the statement's text is the
// same for every count: the database prepares and plans it once per
// connection, not once per size.
func (t *txn) idIn(col string, ids []int64) (string, []any) { return valuesIn(t.s, col, ids, "bigint") }

func (s *Store) idIn(col string, ids []int64) (string, []any) { return valuesIn(s, col, ids, "bigint") }

// textIn is idIn for text values.
func (t *txn) textIn(col string, vals []string) (string, []any) {
	return valuesIn(t.s, col, vals, "text")
}

// valuesIn is the condition "col is one of vals" as one parameter: an array
// of the SQL type pgType, or a JSON array (or, of one value, that value).
func valuesIn[T int64 | string](s *Store, col string, vals []T, pgType string) (string, []any) {
	if s.d.Arrays {
		return col + " = ANY(?::" + pgType + "[])", []any{vals}
	}
	if len(vals) == 1 {
		// One value is the common case of a DAG's claims and outcomes:
		// SQLite looks it up without reading a JSON array.
		return col + " = ?", []any{vals[0]}
	}
	b, _ := json.Marshal(vals) // integers and strings always encode
	return col + " IN (SELECT value FROM json_each(?))", []any{string(b)}
}

// placeholders returns n comma-separated placeholders, for an IN list.
func placeholders(n int) string {
	if n <= 0 {
		return "NULL"
	}
	return strings.Repeat("?, ", n-1) + "?"
}

// auditRow is one audit entry to write. A step's row may also carry its
// task's transition (taskFrom, taskTo, taskReason: see foldAudit).
type auditRow struct {
	taskID   int64
	step     string
	from, to string
	attempt  int
	reason   string
	engine   string
	// at is when the transition happened, where it is not the
	// transaction's time (0): a claim recorded after it (auditClaim).
	at int64

	taskFrom, taskTo, taskReason string
	// stepID is the step's id where the entry ends a run (from running):
	// the row records the run's claim too, read from the step's row as
	// the row is written (flushAudit), unless an earlier row did; or, where
	// claimRead, claim is it, read with the run's end (nil: recorded).
	stepID    int64
	claim     *runClaim
	claimRead bool
	// steps lists, as name, state, name, state, ..., further steps of the
	// task whose transitions ride on the row (foldAudit): one entry each
	// when read, after the row's own.
	steps []string
}

// foldAudit writes entries on the row queued just before them for their
// task, by the same engine, where the row reads them back in the same order
// (scanAudit: the row's own entry, its task's transition, then its list of
// steps), in fewer rows:
//   - a task's transition, on a step's row that carries no task transition
//     and no list yet: a task's start with its first claimed step, its end
//     with its last step;
//   - a step's transition, into the list (each step's name and new state)
//     of a row whose own entry has the same from, attempt and reason and,
//     if it is a step's, the same new state: a task's steps submitted with
//     it (on the task's row), readied together, or finished together where
//     one claim took them (the row's claim is theirs too; only the row's
//     own may start the task) or their claims are recorded already.
//
// A row holds at most entriesPerRow entries.
func foldAudit(entries []auditRow) []auditRow {
	out := entries[:0]
	last := foldLast.Get().(map[int64]int)
	defer func() {
		if len(last) <= maxPooledAudits {
			clear(last)
			foldLast.Put(last)
		}
	}()
	for _, e := range entries {
		if j, ok := last[e.taskID]; ok {
			p := &out[j]
			switch {
			case p.engine != e.engine || p.at != e.at:
			case e.step == "" && p.step != "" && p.taskTo == "" && len(p.steps) == 0:
				p.taskFrom, p.taskTo, p.taskReason = e.from, e.to, e.reason
				continue
			case e.step != "" && e.taskTo == "" && len(e.steps) == 0 && p.from == e.from && p.attempt == e.attempt &&
				p.reason == e.reason && (p.step == "" || p.to == e.to) && p.entries()+e.entries() <= entriesPerRow && sameRun(p, &e):
				p.steps = append(p.steps, e.step, e.to)
				continue
			}
		}
		out = append(out, e)
		last[e.taskID] = len(out) - 1
	}
	return out
}

// sameRun reports whether e may ride on row p as far as claims go: neither
// ends a run, or both do, with their claims read and made together (e's
// not starting the task) or recorded already.
func sameRun(p, e *auditRow) bool {
	if p.stepID == 0 || e.stepID == 0 {
		return p.stepID == 0 && e.stepID == 0
	}
	if !p.claimRead || !e.claimRead || p.claim == nil || e.claim == nil {
		return p.claimRead && e.claimRead && p.claim == nil && e.claim == nil
	}
	return p.claim.sameAs(e.claim) && !e.claim.starts
}

// stepsText is the row's list of steps as written: a JSON array, or empty.
func (r *auditRow) stepsText() string {
	if len(r.steps) == 0 {
		return ""
	}
	b, _ := json.Marshal(r.steps) // strings always encode
	return string(b)
}

// entries counts the entries the row reads back as.
func (r *auditRow) entries() int {
	n := 1 + len(r.steps)/2
	if r.taskTo != "" {
		n++
	}
	if r.stepID != 0 {
		n += 2 + len(r.steps)/2 // the claims, and the task's start
	}
	return n
}

// flushAudit writes the queued audit entries, folded (foldAudit), in one
// statement whatever their count, sent with the commit where it can be
// (soon).
func (t *txn) flushAudit() error {
	queued := t.audits
	entries := foldAudit(queued)
	t.audits = nil
	defer putAuditBuffer(queued)
	if len(entries) == 0 {
		return nil
	}
	for i := range entries {
		if e := &entries[i]; e.step != "" && e.from == string(state.StepRunning) && e.stepID == 0 {
			return fmt.Errorf("audit step %q of task %d: its run ends without the step's id to record its claim with", e.step, e.taskID)
		}
	}
	var from string
	var args []any
	if len(entries) == 1 && !t.s.d.Arrays {
		from, args = paramRow("u", &entries[0], auditRowset...)
	} else {
		from, args = rowset(t, "u", entries, auditRowset...)
	}
	q := `INSERT INTO audit (task_id, step, from_state, to_state, at, attempt, engine_id, reason, task_from, task_to, task_reason, steps, claim)
		SELECT u_task, u_step, u_from, u_to, CASE WHEN u_at = 0 THEN ? ELSE u_at END, u_attempt, u_engine, u_reason, u_task_from, u_task_to, u_task_reason, u_steps, ` + claimOfRun + ` FROM ` + from
	return t.soon("audit", q, append([]any{t.now}, args...)...)
}

// auditRowset are the columns of flushAudit's rowset.
var auditRowset = []col[auditRow]{
	intCol("u_task", func(e *auditRow) int64 { return e.taskID }),
	textCol("u_step", func(e *auditRow) string { return e.step }),
	textCol("u_from", func(e *auditRow) string { return e.from }),
	textCol("u_to", func(e *auditRow) string { return e.to }),
	intCol("u_attempt", func(e *auditRow) int64 { return int64(e.attempt) }),
	textCol("u_engine", func(e *auditRow) string { return e.engine }),
	textCol("u_reason", func(e *auditRow) string { return e.reason }),
	intCol("u_at", func(e *auditRow) int64 { return e.at }),
	textCol("u_task_from", func(e *auditRow) string { return e.taskFrom }),
	textCol("u_task_to", func(e *auditRow) string { return e.taskTo }),
	textCol("u_task_reason", func(e *auditRow) string { return e.taskReason }),
	textCol("u_steps", (*auditRow).stepsText),
	intCol("u_step_id", func(e *auditRow) int64 { return e.stepID }),
	textCol("u_claim", func(e *auditRow) string {
		if e.claim == nil {
			return ""
		}
		return e.claim.text()
	}),
	intCol("u_claim_read", func(e *auditRow) int64 {
		if e.claimRead {
			return 1
		}
		return 0
	}),
}

// claimOfRun is the claim column of an audit row of flushAudit's: for a
// row that ends a run (u_step_id), the run's claim as read with its end
// (u_claim_read), or as the step's row holds it until the next claim,
// unless an audit row has it already (claim_audited); the run's attempt
// is the row's, or, where the row names none, the step's.
const claimOfRun = `CASE WHEN u_claim_read = 1 THEN u_claim WHEN u_step_id = 0 THEN '' ELSE COALESCE((SELECT ` +
	claimAt + `CASE WHEN u_attempt > 0 THEN u_attempt ELSE s.attempt END` + claimRest + `
		FROM steps s JOIN tasks t ON t.id = s.task_id WHERE s.id = u_step_id AND s.claim_audited = 0), '') END`

// auditBuffers keeps the backing arrays of transactions' audit queues
// between writes: a busy engine queues thousands of entries a second, and
// growing a new queue each time was a fifth of the SQLite writer's garbage.
var auditBuffers = sync.Pool{New: func() any { return new([]auditRow) }}

// foldLast keeps foldAudit's maps (each task's last row) between writes.
var foldLast = sync.Pool{New: func() any { return map[int64]int{} }}

// maxPooledAudits bounds the queues kept: a rare huge write's is dropped.
const maxPooledAudits = 4096

// getAuditBuffer returns an empty audit queue with room.
func getAuditBuffer() []auditRow {
	return (*auditBuffers.Get().(*[]auditRow))[:0]
}

// putAuditBuffer keeps q's backing array for the next write, emptied of
// what its entries referenced. Past len(q) it holds nothing: entries are
// only appended until the queue is flushed, and each queue comes back
// cleared.
func putAuditBuffer(q []auditRow) {
	if cap(q) == 0 || cap(q) > maxPooledAudits {
		return
	}
	clear(q)
	q = q[:0]
	auditBuffers.Put(&q)
}

// auditRoom makes room in the audit queue for n more entries.
func (t *txn) auditRoom(n int) {
	if t.audits == nil {
		t.audits = getAuditBuffer()
	}
	t.audits = slices.Grow(t.audits, n)
}

// leftReady reports whether this transaction made steps ready that a
// claim in it did not take: the engines are woken for those.
func (t *txn) leftReady() bool { return t.readied > t.tookReady }

// madeReady counts a step this transaction made ready.
func (t *txn) madeReady(id int64) {
	t.readied++
	if t.trackReady {
		t.readyIDs = append(t.readyIDs, id)
	}
}

// audit queues one audit entry; the transaction writes the queue in bulk
// before it commits.
func (t *txn) audit(taskID int64, step string, from, to string, attempt int, reason string) {
	if step == "" && state.Task(to).Terminal() {
		t.endedTask = true
	}
	t.auditRoom(1)
	t.audits = append(t.audits, auditRow{taskID: taskID, step: step, from: from, to: to, attempt: attempt, reason: reason, engine: t.engine})
}

// auditRunEnd queues the audit entry of a step's run that ends, moving the
// step from running to to; its row records the run's claim too.
func (t *txn) auditRunEnd(stepID, taskID int64, step string, to state.Step, attempt int, reason string) {
	t.auditRoom(1)
	t.audits = append(t.audits, auditRow{taskID: taskID, step: step, from: string(state.StepRunning), to: string(to),
		attempt: attempt, reason: reason, engine: t.engine, stepID: stepID})
}

// auditClaim queues the entries of claim c of task taskID's step, as they
// read back (runClaim.entries): the step's claim, and the task's start on
// its row where the claim started the task (foldAudit).
func (t *txn) auditClaim(taskID int64, step string, c runClaim) {
	for _, e := range c.entries(taskID, step) {
		t.auditRoom(1)
		t.audits = append(t.audits, auditRow{taskID: taskID, step: e.Step, from: e.From, to: e.To, attempt: e.Attempt,
			reason: e.Reason, engine: e.EngineID, at: c.at})
	}
}

// auditMove queues the audit entry of a step moved from from to to.
func (t *txn) auditMove(stepID, taskID int64, step string, from, to state.Step, attempt int, reason string) {
	if from == state.StepRunning {
		t.auditRunEnd(stepID, taskID, step, to, attempt, reason)
		return
	}
	t.audit(taskID, step, string(from), string(to), attempt, reason)
}

// moveStep changes one step's state with a compare-and-swap on from, after
// checking the edge against the state machine, and records it. set adds
// column assignments. It reports whether the row matched.
func (t *txn) moveStep(id, taskID int64, name string, from, to state.Step, attempt int, reason, set string, args ...any) (bool, error) {
	q, qargs, err := stepMove(id, taskID, name, from, to, set, args)
	if err != nil {
		return false, err
	}
	res, err := t.exec(q, qargs...)
	if err != nil {
		return false, fmt.Errorf("step %q of task %d %s -> %s: %w", name, taskID, from, to, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return false, nil
	}
	t.auditMove(id, taskID, name, from, to, attempt, reason)
	return true, nil
}

// moveLockedStep is moveStep for a step whose row this transaction holds
// locked in state from: the change cannot miss, so nothing waits for it
// (soon).
func (t *txn) moveLockedStep(id, taskID int64, name string, from, to state.Step, attempt int, reason, set string, args ...any) error {
	q, qargs, err := stepMove(id, taskID, name, from, to, set, args)
	if err != nil {
		return err
	}
	if err := t.soon(fmt.Sprintf("step %q of task %d %s -> %s", name, taskID, from, to), q, qargs...); err != nil {
		return err
	}
	t.auditMove(id, taskID, name, from, to, attempt, reason)
	return nil
}

// stepMove is the statement of moveStep, once the edge is checked.
func stepMove(id, taskID int64, name string, from, to state.Step, set string, args []any) (string, []any, error) {
	if err := state.CheckStep(from, to); err != nil {
		return "", nil, fmt.Errorf("step %q of task %d: %w", name, taskID, err)
	}
	q := `UPDATE steps SET state = ?`
	if set != "" {
		q += ", " + set
	}
	q += ` WHERE id = ? AND state = ?`
	return q, append(append([]any{string(to)}, args...), id, string(from)), nil
}

// moveTask changes a task's state with a compare-and-swap and records it.
func (t *txn) moveTask(id int64, from, to state.Task, reason, set string, args ...any) (bool, error) {
	if err := state.CheckTask(from, to); err != nil {
		return false, fmt.Errorf("task %d: %w", id, err)
	}
	q := `UPDATE tasks SET state = ?`
	if set != "" {
		q += ", " + set
	}
	q += ` WHERE id = ? AND state = ?`
	res, err := t.exec(q, append(append([]any{string(to)}, args...), id, string(from))...)
	if err != nil {
		return false, fmt.Errorf("task %d %s -> %s: %w", id, from, to, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return false, nil
	}
	if to == state.TaskRunning && t.s.d.LimitRoom != "" {
		// Back to running under a workflow limit: its namespace's total of
		// tasks grows, as a claim's start does (limitbounds.go).
		if _, err := t.exec(`INSERT INTO limit_claims AS l (namespace, steps, tasks)
			SELECT namespace, 0, 1 FROM tasks WHERE id = ? AND limit_key != ''
			ON CONFLICT (namespace) DO UPDATE SET tasks = l.tasks + 1`, id); err != nil {
			return false, fmt.Errorf("task %d: count its return to running: %w", id, err)
		}
	}
	t.audit(id, "", string(from), string(to), 0, reason)
	return true, nil
}
