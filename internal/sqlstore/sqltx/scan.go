package sqltx

import (
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/weftrun/weft/internal/sqlstore/sqldb"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// This file reads rows into records: one scan function per record type, for
// sqldb.Collect. Columns that hold encoded values (times as microseconds,
// index lists as text) are decoded here.

// ScanFence reads the columns id, attempt, lease_id of a step.
func ScanFence(r sqldb.Row) (store.Fence, error) {
	var f store.Fence
	err := r.Scan(&f.StepID, &f.Attempt, &f.LeaseID)
	return f, err
}

const WorkflowColumns = `namespace, name, version, definition, created_at`

func ScanWorkflow(r sqldb.Row) (store.WorkflowRecord, error) {
	var w store.WorkflowRecord
	var def string
	var at int64
	if err := r.Scan(&w.Namespace, &w.Name, &w.Version, &def, &at); err != nil {
		return w, fmt.Errorf("scan workflow: %w", err)
	}
	w.Definition = json.RawMessage(def)
	w.CreatedAt = time.UnixMicro(at)
	return w, nil
}

const TaskColumns = `id, namespace, workflow, version, state, input, priority, idempotency_key, run_at, good_until, created_at, started_at, finished_at, error, schedule, schedule_tick, parent_task_id, depth, tags, trace_context`

func ScanTask(r sqldb.Row) (store.Task, error) {
	var t store.Task
	var st, input string
	var key sql.NullString
	var runAt, created int64
	var goodUntil, started, finished, tick, parent sql.NullInt64
	var tags, traceContext sql.NullString
	err := r.Scan(&t.ID, &t.Namespace, &t.Workflow, &t.Version, &st, &input, &t.Priority, &key, &runAt, &goodUntil, &created, &started, &finished, &t.Error,
		&t.Schedule, &tick, &parent, &t.Depth, &tags, &traceContext)
	if err != nil {
		return t, err
	}
	if t.Tags, err = decodeTags(tags); err != nil {
		return t, fmt.Errorf("task %d: %w", t.ID, err)
	}
	t.State = state.Task(st)
	t.Input = json.RawMessage(input)
	t.IdempotencyKey = key.String
	t.RunAt = time.UnixMicro(runAt)
	t.GoodUntil = OptTime(goodUntil)
	t.CreatedAt = time.UnixMicro(created)
	t.StartedAt = OptTime(started)
	t.FinishedAt = OptTime(finished)
	t.ScheduleTick = OptTime(tick)
	t.ParentTaskID = parent.Int64
	t.TraceParent, t.TraceState = UnpackTrace(traceContext.String)
	return t, nil
}

// stepFields are the columns of a step's row that a StepScan reads, in
// order, each with where it goes; claimSets marks those a claim sets to
// values its caller knows (claimed).
var stepFields = []struct {
	column    string
	dest      func(x *StepScan) any
	claimSets bool
}{
	{"id", func(x *StepScan) any { return &x.s.ID }, false},
	{"task_id", func(x *StepScan) any { return &x.s.TaskID }, false},
	{"idx", func(x *StepScan) any { return &x.s.Index }, false},
	{"name", func(x *StepScan) any { return &x.s.Name }, false},
	{"handler", func(x *StepScan) any { return &x.s.Handler }, false},
	{"namespace", func(x *StepScan) any { return &x.s.Namespace }, false},
	{"state", func(x *StepScan) any { return &x.st }, true},
	{"sub", func(x *StepScan) any { return &x.s.Sub }, true},
	{"deps", func(x *StepScan) any { return &x.deps }, false},
	{"attempt", func(x *StepScan) any { return &x.s.Attempts }, false},
	{"max_attempts", func(x *StepScan) any { return &x.s.MaxAttempts }, false},
	{"priority", func(x *StepScan) any { return &x.s.Priority }, false},
	{"result", func(x *StepScan) any { return &x.result }, false},
	{"error", func(x *StepScan) any { return &x.s.Error }, true},
	{"checkpoint", func(x *StepScan) any { return &x.checkpoint }, false},
	{"run_at", func(x *StepScan) any { return &x.runAt }, true},
	{"engine_id", func(x *StepScan) any { return &x.s.EngineID }, true},
	{"started_at", func(x *StepScan) any { return &x.started }, true},
	{"finished_at", func(x *StepScan) any { return &x.fin }, false},
	{"kind", func(x *StepScan) any { return &x.s.Kind }, false},
	{"template", func(x *StepScan) any { return &x.s.Template }, false},
	{"item", func(x *StepScan) any { return &x.item }, false},
	{"signal", func(x *StepScan) any { return &x.s.Signal }, false},
	{"progress", func(x *StepScan) any { return &x.progress }, false},
	{"progress_msg", func(x *StepScan) any { return &x.s.ProgressMessage }, false},
	{"deadline", func(x *StepScan) any { return &x.deadline }, false},
	{"child_task_id", func(x *StepScan) any { return &x.child }, false},
	{"child_error", func(x *StepScan) any { return &x.childErr }, false},
	{"preemptible", func(x *StepScan) any { return &x.preemptible }, false},
}

// StepColumns are the columns of stepFields; ClaimedStepColumns those a
// claim does not set, which it returns: a claim under a backlog returns a
// hundred rows, every value of them read through cgo on SQLite.
var StepColumns, ClaimedStepColumns = stepFieldColumns(false), stepFieldColumns(true)

// stepFieldColumns lists the columns of stepFields, less those a claim
// sets where claimed.
func stepFieldColumns(claimed bool) string {
	var cols []string
	for _, f := range stepFields {
		if !claimed || !f.claimSets {
			cols = append(cols, f.column)
		}
	}
	return strings.Join(cols, ", ")
}

// HeldStepSelect reads steps (as s) with StepColumns, then the lease, the
// workflow, the version and the trace context of their task (as t), for
// ScanHeldStep.
var HeldStepSelect = `SELECT ` + Qualify("s", StepColumns) + `, s.lease_id, t.workflow, t.version, t.trace_context FROM steps s JOIN tasks t ON t.id = s.task_id`

// Qualify prefixes each column of a comma-separated list with a table alias.
func Qualify(alias, columns string) string {
	cols := strings.Split(columns, ",")
	for i, c := range cols {
		cols[i] = alias + "." + strings.TrimSpace(c)
	}
	return strings.Join(cols, ", ")
}

// StepRow is a step as read, the indexes of its dependencies still to be
// named by the caller.
type StepRow struct {
	store.Step
	Deps []int
}

// StepScan holds what a row of StepColumns is scanned into before it is
// decoded, so that a query can read more columns after them.
type StepScan struct {
	s                   store.Step
	st, deps            string
	result, checkpoint  sql.NullString
	item                sql.NullString
	runAt, started, fin sql.NullInt64
	deadline            sql.NullInt64
	progress            sql.NullFloat64
	child               sql.NullInt64
	childErr            sql.NullString
	preemptible         int64
}

// dest returns the scan destinations of StepColumns, in order.
func (x *StepScan) dest() []any { return x.fieldDest(false) }

// ClaimedDest returns the scan destinations of ClaimedStepColumns, in
// order; claimed decodes what they read.
func (x *StepScan) ClaimedDest() []any { return x.fieldDest(true) }

func (x *StepScan) fieldDest(claimed bool) []any {
	dest := make([]any, 0, len(stepFields))
	for _, f := range stepFields {
		if !claimed || !f.claimSets {
			dest = append(dest, f.dest(x))
		}
	}
	return dest
}

// row decodes what was scanned.
func (x *StepScan) row() StepRow {
	s := x.s
	s.State = state.Step(x.st)
	if x.result.Valid {
		s.Result = json.RawMessage(x.result.String)
	}
	if x.checkpoint.Valid {
		s.Checkpoint = json.RawMessage(x.checkpoint.String)
	}
	if x.item.Valid {
		s.Item = json.RawMessage(x.item.String)
	}
	if x.progress.Valid {
		p := x.progress.Float64
		s.Progress = &p
	}
	s.RunAt = OptTime(x.runAt)
	s.StartedAt = OptTime(x.started)
	s.FinishedAt = OptTime(x.fin)
	s.Deadline = OptTime(x.deadline)
	s.ChildTaskID, s.ChildError = x.child.Int64, x.childErr.String
	s.Preemptible = x.preemptible != 0
	return StepRow{Step: s, Deps: ParseIdx(x.deps)}
}

// Claimed decodes a row of ClaimedStepColumns of a step claimed by engine
// at now (microseconds), which the claim set: running, no sub-status, no
// error, no time to run at.
func (x *StepScan) Claimed(engine string, now int64) StepRow {
	x.st, x.s.Sub, x.s.Error, x.runAt = string(state.StepRunning), "", "", sql.NullInt64{}
	x.s.EngineID, x.started = engine, sql.NullInt64{Int64: now, Valid: true}
	return x.row()
}

// ScanStep reads a row of StepColumns.
func ScanStep(r sqldb.Row) (StepRow, error) {
	var x StepScan
	if err := r.Scan(x.dest()...); err != nil {
		return StepRow{}, err
	}
	return x.row(), nil
}

// StepRef is what a cascade needs of a step: its id, name and children.
type StepRef struct {
	ID             int64
	Name, Children string
}

// ScanStepRef reads id, name and children.
func ScanStepRef(r sqldb.Row) (StepRef, error) {
	var v StepRef
	err := r.Scan(&v.ID, &v.Name, &v.Children)
	return v, err
}

// ScanHeldStep reads a row of HeldStepSelect: a step with its fence, its
// workflow and its version, but not its input or dependencies.
func ScanHeldStep(r sqldb.Row) (store.ClaimedStep, error) {
	var x StepScan
	var c store.ClaimedStep
	var traceContext string
	if err := r.Scan(append(x.dest(), &c.Fence.LeaseID, &c.Workflow, &c.Version, &traceContext)...); err != nil {
		return c, err
	}
	c.Step = x.row().Step
	c.Fence.StepID, c.Fence.Attempt = c.ID, c.Attempts
	c.TraceParent, c.TraceState = UnpackTrace(traceContext)
	return c, nil
}

// PackTrace is the trace context a task's row keeps (tasks.trace_context):
// the W3C traceparent and, when there is one, a space and the tracestate.
func PackTrace(parent, state string) string {
	if state == "" || parent == "" {
		return parent
	}
	return parent + " " + state
}

// UnpackTrace splits what PackTrace kept.
func UnpackTrace(ctx string) (parent, state string) {
	parent, state, _ = strings.Cut(ctx, " ")
	return parent, state
}

const AuditColumns = `id, task_id, step, from_state, to_state, at, attempt, engine_id, reason, task_from, task_to, task_reason, steps, claim`

// AuditRead is one audit row as read: one entry, two when the row also
// carries its task's transition (see foldAudit), or, for a task's
// submission, one for the task and one for each of its steps; a row that
// ends a step's run starts with the run's claim (and its task's start,
// where the claim started it).
type AuditRead struct {
	Row     int64 // the row's id
	Entries []store.AuditEntry
}

// EntriesPerRow bounds the entries of one audit row: an entry's ID is its
// row's id times EntriesPerRow plus its place in the row, so that each has
// its own ID, in the order they happened.
const EntriesPerRow = 1 << 13

// ScanAudit reads AuditColumns.
func ScanAudit(r sqldb.Row, extra ...any) (AuditRead, error) {
	var e store.AuditEntry
	var row, at int64
	var taskFrom, taskTo, taskReason, steps, claimText string
	if err := r.Scan(append([]any{&row, &e.TaskID, &e.Step, &e.From, &e.To, &at, &e.Attempt, &e.EngineID, &e.Reason,
		&taskFrom, &taskTo, &taskReason, &steps, &claimText}, extra...)...); err != nil {
		return AuditRead{}, fmt.Errorf("scan audit: %w", err)
	}
	e.ID, e.At = row*EntriesPerRow, time.UnixMicro(at)
	a := AuditRead{Row: row}
	if e.To == "" {
		// A claim no audit row records yet (UnauditedClaims): its
		// entries, with no ID.
		c, err := parseClaim(claimText)
		if err != nil {
			return AuditRead{}, fmt.Errorf("scan audit: step %q of task %d: %w", e.Step, e.TaskID, err)
		}
		a.Entries = c.entries(e.TaskID, e.Step)
		return a, nil
	}
	var list []string
	if steps != "" {
		if err := json.Unmarshal([]byte(steps), &list); err != nil || len(list)%2 != 0 {
			return AuditRead{}, fmt.Errorf("scan audit: row %d: steps %q: not a list of names and states", row, steps)
		}
	}
	if claimText != "" {
		// The claims of the runs the row ends come first: its own step's
		// (with the task's start, where it started the task), then those
		// of the steps of its list, made by the same claim (foldAudit).
		c, err := parseClaim(claimText)
		if err != nil {
			return AuditRead{}, fmt.Errorf("scan audit: row %d: %w", row, err)
		}
		a.Entries = c.entries(e.TaskID, e.Step)
		c.Starts = false
		for i := 0; i < len(list); i += 2 {
			a.Entries = append(a.Entries, c.entries(e.TaskID, list[i])...)
		}
		for i := range a.Entries {
			a.Entries[i].ID = e.ID + int64(i)
		}
		e.ID += int64(len(a.Entries))
	}
	a.Entries = append(a.Entries, e)
	add := func(x store.AuditEntry) {
		x.ID, x.TaskID, x.At, x.EngineID = a.Entries[0].ID+int64(len(a.Entries)), e.TaskID, e.At, e.EngineID
		a.Entries = append(a.Entries, x)
	}
	if taskTo != "" {
		add(store.AuditEntry{From: taskFrom, To: taskTo, Reason: taskReason})
	}
	for i := 0; i < len(list); i += 2 {
		add(store.AuditEntry{Step: list[i], From: e.From, To: list[i+1], Attempt: e.Attempt, Reason: e.Reason})
	}
	return a, nil
}

// UnauditedClaims reads, as rows of AuditColumns, the claims of runs that
// no audit row records yet, from the steps' rows (s, joined to their
// tasks t): rows with no id and no new state, only a claim.
const UnauditedClaims = `0, s.task_id, s.name, '', '', s.started_at, s.attempt, s.engine_id, '', '', '', '', '', ` + claimOfStep + `
	FROM steps s JOIN tasks t ON t.id = s.task_id`

// claimOfStep is the claim of the run a step's row (s, joined to its task
// t) holds, as an audit row's claim column records it (RunClaim.text):
// claimAt, the run's attempt, claimRest. claimOfRun takes the attempt from
// the audit row where it names one.
const (
	claimOfStep = claimAt + `s.attempt` + claimRest
	claimAt     = `s.started_at || ' ' || `
	claimRest   = ` || ' ' || ` + ClaimStarts + ` || ' ' || s.engine_id`
)

// ClaimStarts is 1 where the claim of a step's row (s) started its task
// (t): the task started with the claim under this lease, at this time,
// and this is the step of that claim it rides on (as StepClaim.claim
// reads it from the task's row).
const ClaimStarts = `CASE WHEN t.start_lease = s.lease_id AND t.start_step = s.idx AND t.started_at = s.started_at THEN 1 ELSE 0 END`

// RunClaim is the claim of a step's run as an audit row records it (its
// claim column: "at attempt starts engine") or as the step's row holds it.
type RunClaim struct {
	At      int64 // Unix microseconds
	Attempt int
	Starts  bool // the claim started its task
	Engine  string
}

// sameAs reports whether c and o are one claim (the task's start aside).
func (c *RunClaim) sameAs(o *RunClaim) bool {
	return c.At == o.At && c.Attempt == o.Attempt && c.Engine == o.Engine
}

// text is c as an audit row's claim column records it.
func (c RunClaim) text() string {
	starts := "0"
	if c.Starts {
		starts = "1"
	}
	return strconv.FormatInt(c.At, 10) + " " + strconv.Itoa(c.Attempt) + " " + starts + " " + c.Engine
}

// StepClaim is the claim of a step's run as its row holds it: whether an
// audit row records it already, when, under which lease, by which engine;
// and the step's index.
type StepClaim struct {
	Audited                 int64
	StartedAt, LeaseID, Idx int64
	Engine                  string
}

// parseClaim reads an audit row's claim column.
func parseClaim(text string) (RunClaim, error) {
	var c RunClaim
	f := strings.SplitN(text, " ", 4)
	if len(f) != 4 {
		return c, fmt.Errorf("claim %q: not \"at attempt starts engine\"", text)
	}
	var err error
	if c.At, err = strconv.ParseInt(f[0], 10, 64); err != nil {
		return c, fmt.Errorf("claim %q: at: %w", text, err)
	}
	if c.Attempt, err = strconv.Atoi(f[1]); err != nil {
		return c, fmt.Errorf("claim %q: attempt: %w", text, err)
	}
	c.Starts, c.Engine = f[2] == "1", f[3]
	return c, nil
}

// entries are the audit entries of claim c of task taskID's step: the
// step's claim, then, where it started the task, the task's start.
func (c RunClaim) entries(taskID int64, step string) []store.AuditEntry {
	at := time.UnixMicro(c.At)
	out := []store.AuditEntry{{TaskID: taskID, Step: step, From: string(state.StepReady), To: string(state.StepRunning),
		At: at, Attempt: c.Attempt, EngineID: c.Engine, Reason: reasonClaimed}}
	if c.Starts {
		out = append(out, store.AuditEntry{TaskID: taskID, From: string(state.TaskPending), To: string(state.TaskRunning),
			At: at, EngineID: c.Engine, Reason: reasonFirstClaimed})
	}
	return out
}

// AuditEntries reads rows of AuditColumns as entries, in row order.
func AuditEntries(rows sqldb.Rows) ([]store.AuditEntry, error) {
	read, err := sqldb.Collect(rows, func(r sqldb.Row) (AuditRead, error) { return ScanAudit(r) })
	if err != nil {
		return nil, err
	}
	var out []store.AuditEntry
	for _, a := range read {
		out = append(out, a.Entries...)
	}
	return out, nil
}

// ScanEngine reads engineColumns.
func ScanEngine(r sqldb.Row) (store.EngineInfo, error) {
	var e store.EngineInfo
	var started, hb int64
	var owner sql.NullString
	if err := r.Scan(&e.ID, &e.Host, &e.PID, &started, &hb, &e.Leader, &owner); err != nil {
		return e, fmt.Errorf("scan engine: %w", err)
	}
	e.StartedAt, e.HeartbeatAt = time.UnixMicro(started), time.UnixMicro(hb)
	e.Worker, e.Owner = owner.Valid, owner.String
	return e, nil
}

const APIKeyColumns = `id, name, hash, permissions, created_at, revoked_at`

func ScanAPIKey(r sqldb.Row) (store.APIKey, error) {
	var k store.APIKey
	var hash, perms string
	var created int64
	var revoked sql.NullInt64
	if err := r.Scan(&k.ID, &k.Name, &hash, &perms, &created, &revoked); err != nil {
		return k, err
	}
	h, err := hex.DecodeString(hash)
	if err != nil {
		return k, fmt.Errorf("api key %s: stored hash is not hex: %w", k.ID, err)
	}
	k.Hash = h
	k.Permissions = strings.Fields(perms) // grants hold commas (migration key_scopes)
	k.CreatedAt = time.UnixMicro(created)
	k.RevokedAt = OptTime(revoked)
	return k, nil
}

// ScanQueueCount reads namespace, state and a count.
func ScanQueueCount(r sqldb.Row) (store.QueueCount, error) {
	var c store.QueueCount
	var st string
	if err := r.Scan(&c.Namespace, &st, &c.Count); err != nil {
		return c, err
	}
	c.State = state.Step(st)
	return c, nil
}

func OptTime(v sql.NullInt64) *time.Time {
	if !v.Valid {
		return nil
	}
	t := time.UnixMicro(v.Int64)
	return &t
}

func NullJSON(v sql.NullString) json.RawMessage {
	if !v.Valid || v.String == "" {
		return json.RawMessage("null")
	}
	return json.RawMessage(v.String)
}

func NullIf(cond bool, v int64) any {
	if !cond {
		return nil
	}
	return v
}

// ParseIdx decodes a comma-separated list of step indexes (deps, children).
func ParseIdx(s string) []int {
	if s == "" {
		return nil
	}
	parts := strings.Split(s, ",")
	out := make([]int, 0, len(parts))
	for _, p := range parts {
		var n int
		for _, c := range p {
			n = n*10 + int(c-'0')
		}
		out = append(out, n)
	}
	return out
}

// FormatIdx encodes step indexes as ParseIdx reads them.
func FormatIdx(v []int) string {
	var b strings.Builder
	for i, n := range v {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprint(&b, n)
	}
	return b.String()
}

// BoolInt is a boolean as the integer columns of both stores hold it.
func BoolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// decodeTags reads a task's tags column.
func decodeTags(v sql.NullString) (map[string]string, error) {
	if !v.Valid || v.String == "" {
		return nil, nil
	}
	var tags map[string]string
	if err := json.Unmarshal([]byte(v.String), &tags); err != nil {
		return nil, fmt.Errorf("decode tags: %w", err)
	}
	return tags, nil
}

// The reasons of a claim's audit entries.
const (
	reasonClaimed      = "claimed"
	reasonFirstClaimed = "first step claimed"
)
