package sqltx

import (
	"fmt"
	"slices"
	"sync"

	"github.com/weftrun/weft/state"
)

// This file holds a write transaction's audit queue: the entries its
// changes queue (audit, AuditRunEnd, AuditClaim, auditMove), folded into
// as few rows as read back the same (foldAudit), and written in one
// statement before the transaction commits (FlushAudit), each row that
// ends a run with the run's claim (claimOfRun).

// auditRow is one audit entry to write. A step's row may also carry its
// task's transition (taskFrom, taskTo, taskReason: see foldAudit).
type auditRow struct {
	taskID   int64
	step     string
	from, to string
	Attempt  int
	reason   string
	engine   string
	// at is when the transition happened, where it is not the
	// transaction's time (0): a claim recorded after it (AuditClaim).
	at int64

	taskFrom, taskTo, taskReason string
	// StepID is the step's id where the entry ends a run (from running):
	// the row records the run's claim too, read from the step's row as
	// the row is written (FlushAudit), unless an earlier row did; or, where
	// ClaimRead, claim is it, read with the run's end (nil: recorded).
	StepID    int64
	Claim     *RunClaim
	ClaimRead bool
	// steps lists, as name, state, name, state, ..., further steps of the
	// task whose transitions ride on the row (foldAudit): one entry each
	// when read, after the row's own.
	steps []string
}

// foldAudit writes entries on the row queued just before them for their
// task, by the same engine, where the row reads them back in the same order
// (ScanAudit: the row's own entry, its task's transition, then its list of
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
// A row holds at most EntriesPerRow entries.
// last is an empty map foldAudit fills with each task's last row.
func foldAudit(entries []auditRow, last map[int64]int) []auditRow {
	out := entries[:0]
	for _, e := range entries {
		if j, ok := last[e.taskID]; ok {
			p := &out[j]
			switch {
			case p.engine != e.engine || p.at != e.at:
			case e.step == "" && p.step != "" && p.taskTo == "" && len(p.steps) == 0:
				p.taskFrom, p.taskTo, p.taskReason = e.from, e.to, e.reason
				continue
			case e.step != "" && e.taskTo == "" && len(e.steps) == 0 && p.from == e.from && p.Attempt == e.Attempt &&
				p.reason == e.reason && (p.step == "" || p.to == e.to) && p.entries()+e.entries() <= EntriesPerRow && sameRun(p, &e):
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
	if p.StepID == 0 || e.StepID == 0 {
		return p.StepID == 0 && e.StepID == 0
	}
	if !p.ClaimRead || !e.ClaimRead || p.Claim == nil || e.Claim == nil {
		return p.ClaimRead && e.ClaimRead && p.Claim == nil && e.Claim == nil
	}
	return p.Claim.sameAs(e.Claim) && !e.Claim.Starts
}

// stepsText is the row's list of steps as written: a JSON array, or empty.
func (r *auditRow) stepsText() string {
	if len(r.steps) == 0 {
		return ""
	}
	n := 2
	for _, s := range r.steps {
		n += len(s) + 3
	}
	b := make([]byte, 0, n)
	b = append(b, '[')
	for i, s := range r.steps {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, s)
	}
	return string(append(b, ']'))
}

// entries counts the entries the row reads back as.
func (r *auditRow) entries() int {
	n := 1 + len(r.steps)/2
	if r.taskTo != "" {
		n++
	}
	if r.StepID != 0 {
		n += 2 + len(r.steps)/2 // the claims, and the task's start
	}
	return n
}

// FlushAudit writes the queued audit entries, folded (foldAudit), in one
// statement whatever their count, sent with the commit where it can be
// (soon).
func (t *Tx) FlushAudit() error {
	queued := t.Audits
	last := t.H.auditScratch.fold()
	entries := foldAudit(queued, last)
	t.Audits = nil
	defer t.H.auditScratch.put(queued, last)
	if len(entries) == 0 {
		return nil
	}
	for i := range entries {
		if e := &entries[i]; e.step != "" && e.from == string(state.StepRunning) && e.StepID == 0 {
			return fmt.Errorf("audit step %q of task %d: its run ends without the step's id to record its claim with", e.step, e.taskID)
		}
	}
	var from string
	var args []any
	if t.ByParams(len(entries)) {
		from, args = paramRow("u", &entries[0], auditRowset...)
	} else {
		from, args = Rowset(t, "u", entries, auditRowset...)
	}
	q := `INSERT INTO audit (task_id, step, from_state, to_state, at, attempt, engine_id, reason, task_from, task_to, task_reason, steps, claim)
		SELECT u_task, u_step, u_from, u_to, CASE WHEN u_at = 0 THEN ? ELSE u_at END, u_attempt, u_engine, u_reason, u_task_from, u_task_to, u_task_reason, u_steps, ` + claimOfRun + ` FROM ` + from
	return t.Soon("audit", q, append([]any{t.Now}, args...)...)
}

// auditRowset are the columns of FlushAudit's rowset.
var auditRowset = []col[auditRow]{
	IntCol("u_task", func(e *auditRow) int64 { return e.taskID }),
	TextCol("u_step", func(e *auditRow) string { return e.step }),
	TextCol("u_from", func(e *auditRow) string { return e.from }),
	TextCol("u_to", func(e *auditRow) string { return e.to }),
	IntCol("u_attempt", func(e *auditRow) int64 { return int64(e.Attempt) }),
	TextCol("u_engine", func(e *auditRow) string { return e.engine }),
	TextCol("u_reason", func(e *auditRow) string { return e.reason }),
	IntCol("u_at", func(e *auditRow) int64 { return e.at }),
	TextCol("u_task_from", func(e *auditRow) string { return e.taskFrom }),
	TextCol("u_task_to", func(e *auditRow) string { return e.taskTo }),
	TextCol("u_task_reason", func(e *auditRow) string { return e.taskReason }),
	TextCol("u_steps", (*auditRow).stepsText),
	IntCol("u_step_id", func(e *auditRow) int64 { return e.StepID }),
	TextCol("u_claim", func(e *auditRow) string {
		if e.Claim == nil {
			return ""
		}
		return e.Claim.text()
	}),
	IntCol("u_claim_read", func(e *auditRow) int64 { return BoolInt(e.ClaimRead) }),
}

// claimOfRun is the claim column of an audit row of FlushAudit's: for a
// row that ends a run (u_step_id), the run's claim as read with its end
// (u_claim_read), or as the step's row holds it until the next claim,
// unless an audit row has it already (claim_audited); the run's attempt
// is the row's, or, where the row names none, the step's.
const claimOfRun = `CASE WHEN u_claim_read = 1 THEN u_claim WHEN u_step_id = 0 THEN '' ELSE COALESCE((SELECT ` +
	claimAt + `CASE WHEN u_attempt > 0 THEN u_attempt ELSE s.attempt END` + claimRest + `
		FROM steps s JOIN tasks t ON t.id = s.task_id WHERE s.id = u_step_id AND s.claim_audited = 0), '') END`

// auditScratch keeps, between writes, the backing arrays of transactions'
// audit queues and foldAudit's maps: a busy engine queues thousands of
// entries a second, and growing a new queue each time was a fifth of the
// SQLite writer's garbage. The store keeps them rather than a sync.Pool,
// which every garbage collection empties: a busy engine's heap is small
// (2 MB in fanout5, collected every 10 to 15 ms), and with a pool, queues
// grown anew were still 5% of the bytes it allocated.
type auditScratch struct {
	queues scratch[[]auditRow]
	maps   scratch[map[int64]int]
}

// keptScratch bounds the queues and maps kept: a few writes under way at
// once (PostgreSQL) each get one back; SQLite's one writer needs one.
const keptScratch = 4

// maxKeptAudits bounds the size of what is kept: a rare huge write's is
// dropped.
const maxKeptAudits = 4096

// queue returns an empty audit queue, with room where one was kept.
func (a *auditScratch) queue() []auditRow {
	q, _ := a.queues.take()
	return q
}

// fold returns an empty map for foldAudit.
func (a *auditScratch) fold() map[int64]int {
	if m, ok := a.maps.take(); ok {
		return m
	}
	return map[int64]int{}
}

// put keeps audit queue q and foldAudit's map last for the next writes,
// emptied of what they referenced. Past len(q) the queue holds nothing:
// entries are only appended until the queue is flushed, and each queue
// comes back cleared.
func (a *auditScratch) put(q []auditRow, last map[int64]int) {
	if cap(q) > 0 && cap(q) <= maxKeptAudits {
		clear(q)
		a.queues.keep(q[:0])
	}
	if last != nil && len(last) <= maxKeptAudits {
		clear(last)
		a.maps.keep(last)
	}
}

// scratch keeps up to keptScratch values between writes.
type scratch[T any] struct {
	mu   sync.Mutex
	kept []T
}

// take returns a value kept, if there is one.
func (s *scratch[T]) take() (v T, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.kept)
	if n == 0 {
		return v, false
	}
	v = s.kept[n-1]
	s.kept = s.kept[:n-1]
	return v, true
}

// keep keeps v, unless keptScratch values are kept already.
func (s *scratch[T]) keep(v T) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.kept) < keptScratch {
		s.kept = append(s.kept, v)
	}
}

// AuditRoom makes room in the audit queue for n more entries.
func (t *Tx) AuditRoom(n int) {
	if t.Audits == nil {
		t.Audits = t.H.auditScratch.queue()
	}
	t.Audits = slices.Grow(t.Audits, n)
}

// Audit queues one audit entry; the transaction writes the queue in bulk
// before it commits.
func (t *Tx) Audit(taskID int64, step string, from, to string, attempt int, reason string) {
	if step == "" && state.Task(to).Terminal() {
		t.EndedTask = true
	}
	t.AuditRoom(1)
	t.Audits = append(t.Audits, auditRow{taskID: taskID, step: step, from: from, to: to, Attempt: attempt, reason: reason, engine: t.Engine})
}

// AuditRunEnd queues the audit entry of a step's run that ends, moving the
// step from running to to; its row records the run's claim too.
func (t *Tx) AuditRunEnd(stepID, taskID int64, step string, to state.Step, attempt int, reason string) {
	t.AuditRoom(1)
	t.Audits = append(t.Audits, auditRow{taskID: taskID, step: step, from: string(state.StepRunning), to: string(to),
		Attempt: attempt, reason: reason, engine: t.Engine, StepID: stepID})
}

// AuditClaim queues the entries of claim c of task taskID's step, as they
// read back (RunClaim.entries): the step's claim, and the task's start on
// its row where the claim started the task (foldAudit).
func (t *Tx) AuditClaim(taskID int64, step string, c RunClaim) {
	for _, e := range c.entries(taskID, step) {
		t.AuditRoom(1)
		t.Audits = append(t.Audits, auditRow{taskID: taskID, step: e.Step, from: e.From, to: e.To, Attempt: e.Attempt,
			reason: e.Reason, engine: e.EngineID, at: c.At})
	}
}

// auditMove queues the audit entry of a step moved from from to to.
func (t *Tx) auditMove(stepID, taskID int64, step string, from, to state.Step, attempt int, reason string) {
	if from == state.StepRunning {
		t.AuditRunEnd(stepID, taskID, step, to, attempt, reason)
		return
	}
	t.Audit(taskID, step, string(from), string(to), attempt, reason)
}
