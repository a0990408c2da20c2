package model

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/weftrun/weft/internal/weftproc"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/wire"
)

// Config is one model run.
type Config struct {
	Store string // "sqlite" or "postgres"
	DB    string // postgres: the server (a schema of the run's own is made and dropped)
	Root  string // the repository, for go build
	Bin   string // a built weft binary (built from Root when empty)
	// Workers is how many `weft worker` engines run beside `weft serve`'s
	// (default 2).
	Workers int
	// Lease is the engines' lease when the binary takes --lease-ttl
	// (default 2s); otherwise the default 30s is in force.
	Lease time.Duration
	// Bound is how long a task may go unexplained, or a ready step that a
	// live engine serves may go unclaimed (default 2×lease + 10s).
	Bound time.Duration
	// CheckEvery is how often the database's state is checked against the
	// model (the ledger is read after every op; default 500ms).
	CheckEvery time.Duration
	// Skip turns invariants off (their names: see the Inv constants). For
	// developing on a tree that lacks a fix only: the command checks all.
	Skip    map[string]bool
	KeepDir bool
	Log     io.Writer
	// StopAtFirst ends the run at its first violation; StopOn at the
	// first of that invariant (shrinking's trials do).
	StopAtFirst bool
	StopOn      string
	logf        func(string, ...any)
}

// Invariants.
const (
	InvOverlap   = "overlap"    // no step runs in two places at once
	InvStranded  = "stranded"   // every open task waits for a reason the model can name
	InvUnclaimed = "unclaimed"  // a ready step a live engine serves is claimed within the bound
	InvUnheld    = "unheld"     // a running step is held by a live engine or worker, or reclaimed within the bound
	InvAudit     = "audit"      // the audit trail's last transitions equal the states
	InvCounts    = "counts"     // the tasks REST lists agree with the model's
	InvIDReuse   = "id-reuse"   // ids are never reused
	InvEffect    = "effect"     // an action that reports success changed what it said
	InvRefused   = "refused"    // an action on something that does not exist is refused
	InvServerErr = "server-err" // no 500 answers
	InvExit      = "exit"       // no weft process exits unasked
	InvTaskState = "task-state" // a task is pending until a step of it begins, and running while one runs or waits for a signal
)

// Invariants lists them all.
var Invariants = []string{InvOverlap, InvStranded, InvUnclaimed, InvUnheld, InvAudit, InvCounts, InvIDReuse, InvEffect, InvRefused, InvServerErr, InvExit, InvTaskState}

// Violation is one broken invariant, at the op (index into the sequence)
// after which it was seen.
type Violation struct {
	Invariant string
	Op        int
	Detail    string
}

func (v Violation) String() string {
	return fmt.Sprintf("op %d: %s: %s", v.Op, v.Invariant, v.Detail)
}

// Result is what a run found.
type Result struct {
	Ops        int // ops run
	Tasks      int // distinct task ids seen
	Violations []Violation
	Elapsed    time.Duration
	// ByKind is the time spent in each kind of op, and Checks in the
	// state checks.
	ByKind map[string]time.Duration
	Checks time.Duration
}

func (c *Config) defaults() {
	if c.Workers <= 0 {
		c.Workers = 2
	}
	if c.Lease <= 0 {
		c.Lease = 2 * time.Second
	}
	if c.CheckEvery <= 0 {
		c.CheckEvery = 500 * time.Millisecond
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	if c.logf == nil {
		c.logf = func(f string, a ...any) { fmt.Fprintf(c.Log, "model: "+f+"\n", a...) }
	}
}

// mtask is what the model knows of a task.
type mtask struct {
	id        int64
	workflow  string
	created   time.Time
	gone      bool // deleted or pruned
	signalled bool
	root      bool // submitted by an op (not a child or a schedule's tick)
}

// runner drives one cluster through one sequence.
type runner struct {
	cfg     Config
	c       *cluster
	ops     []Op
	cur     int // the op being run
	res     *Result
	tasks   map[int64]*mtask
	order   []int64 // task ids in the order seen
	ids     *IDTracker
	overlap *OverlapChecker
	ledgerF *os.File
	ledgerR *bufio.Reader
	partial string
	waits   *WaitTracker
	paused  map[string]bool
	limited map[string]bool
	// remoteSilentUntil: the remote worker went silent (lease expiry) and
	// serves nothing until then.
	remoteSilentUntil time.Time
	lastCheck         time.Time
	// Targets of operator actions: open (and waiting) are the tasks the
	// last state check saw open; failed, failedSteps and ended what
	// refreshTargets last listed.
	open, failed, ended []int64
	failedSteps         []int64
	waiting             []int64               // tasks with a step waiting for a signal
	quiet               bool                  // the last check saw nothing that moves by itself
	read                map[int64]*store.Task // the open tasks as the last state check read them
}

// Run builds the binary if needed, starts a cluster and runs ops on it.
// An error means the run could not proceed (not a finding).
func Run(ctx context.Context, cfg Config, ops []Op) (*Result, error) {
	cfg.defaults()
	start := time.Now()
	bin := cfg.Bin
	if bin == "" {
		dir, err := os.MkdirTemp("", "weft-model-bin-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		if bin, err = weftproc.Build(ctx, cfg.Root, dir); err != nil {
			return nil, err
		}
	}
	c, err := startCluster(ctx, cfg, bin)
	if err != nil {
		return nil, err
	}
	defer c.close()
	if cfg.Bound <= 0 {
		cfg.Bound = 2*c.lease + 10*time.Second
	}
	cfg.logf("cluster up: %d workers + serve (%s), lease %s, bound %s, dir %s", cfg.Workers, cfg.Store, c.lease, cfg.Bound, c.dir)
	r := &runner{cfg: cfg, c: c, ops: ops, res: &Result{ByKind: map[string]time.Duration{}}, tasks: map[int64]*mtask{}, ids: &IDTracker{},
		overlap: &OverlapChecker{Alive: c.alive}, waits: &WaitTracker{Bound: cfg.Bound},
		paused: map[string]bool{}, limited: map[string]bool{}}
	if r.ledgerF, err = os.Open(c.ledger); err != nil {
		return nil, err
	}
	defer r.ledgerF.Close()
	r.ledgerR = bufio.NewReader(r.ledgerF)
	for i, op := range ops {
		if ctx.Err() != nil {
			break
		}
		r.cur = i
		t0 := time.Now()
		err := r.do(ctx, op)
		r.res.ByKind[op.Kind] += time.Since(t0)
		if err != nil {
			return r.res, fmt.Errorf("op %d (%s): %w", i, op, err)
		}
		r.res.Ops = i + 1
		if err := r.c.reap(r.unasked); err != nil {
			return r.res, err
		}
		r.readLedger()
		if time.Since(r.lastCheck) >= cfg.CheckEvery {
			t0 := time.Now()
			if err := r.checkState(ctx); err != nil {
				return r.res, err
			}
			r.res.Checks += time.Since(t0)
		}
		if r.stopped() {
			break
		}
	}
	if !r.stopped() && ctx.Err() == nil {
		if err := r.settle(ctx); err != nil {
			return r.res, err
		}
	}
	r.res.Tasks = len(r.order)
	r.res.Elapsed = time.Since(start)
	if len(r.res.Violations) > 0 {
		for _, w := range append([]*proc{c.serve}, c.workers...) {
			cfg.logf("%s stderr (tail):\n%s", w.Name, w.Tail(15))
		}
	}
	return r.res, nil
}

// unasked reports a process that exited by itself.
func (r *runner) unasked(p *proc, state string) {
	r.violate(InvExit, "%s (pid %d) exited unasked (%s); stderr:\n%s", p.Name, p.PID(), state, p.Tail(15))
}

// stopped reports whether the run should end now (Config.StopAtFirst,
// StopOn).
func (r *runner) stopped() bool {
	for _, v := range r.res.Violations {
		if r.cfg.StopAtFirst || v.Invariant == r.cfg.StopOn {
			return true
		}
	}
	return false
}

func (r *runner) violate(inv, format string, a ...any) {
	if r.cfg.Skip[inv] {
		return
	}
	v := Violation{Invariant: inv, Op: r.cur, Detail: fmt.Sprintf(format, a...)}
	r.res.Violations = append(r.res.Violations, v)
	r.cfg.logf("VIOLATION %s", v)
}

// readLedger feeds the ledger's new complete lines to the overlap checker.
func (r *runner) readLedger() {
	var lines []string
	for {
		s, err := r.ledgerR.ReadString('\n')
		if err != nil {
			r.partial += s
			break
		}
		lines = append(lines, r.partial+strings.TrimSuffix(s, "\n"))
		r.partial = ""
	}
	for _, o := range r.overlap.Feed(lines) {
		r.violate(InvOverlap, "%s", o)
	}
}

// settle ends a run: the namespaces are resumed and unlimited, the
// signals owed are sent, the stopping engines restarted, and the state is
// checked until every task ended or waits for a named reason, for longer
// than the bound (so that a stranded task shows).
func (r *runner) settle(ctx context.Context) error {
	r.cur = len(r.ops)
	deadline := time.Now().Add(r.cfg.Bound + 3*r.c.lease + 5*time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if err := r.c.reap(r.unasked); err != nil {
			return err
		}
		r.readLedger()
		if err := r.checkState(ctx); err != nil {
			return err
		}
		if r.stopped() {
			return nil
		}
		if r.quiet {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	r.readLedger()
	return r.checkEnd(ctx)
}

// see records a task the run met (submitted, a child, a tick), read from
// the database or through the API.
func (r *runner) see(t taskSeen, root bool) {
	if err := r.ids.Task(t.id, t.workflow, t.created); err != nil {
		r.violate(InvIDReuse, "%v", err)
	}
	if m, ok := r.tasks[t.id]; ok {
		if root {
			m.root = true
		}
		return
	}
	r.tasks[t.id] = &mtask{id: t.id, workflow: t.namespace + "/" + t.workflow, created: t.created, root: root}
	r.order = append(r.order, t.id)
}

// taskSeen is what see records of a task.
type taskSeen struct {
	id                  int64
	namespace, workflow string
	created             time.Time
}

func seen(t *store.Task) taskSeen { return taskSeen{t.ID, t.Namespace, t.Workflow, t.CreatedAt} }

// checkState compares the database's open tasks with the model: each must
// wait for a reason the model names, and no ready step that a live engine
// serves waits longer than the bound. It reads an open task whole
// (GetTask) only when it changed since the last check read it (its mark);
// the others are classified again as read then, with the time now.
func (r *runner) checkState(ctx context.Context) error {
	r.lastCheck = time.Now()
	open, err := r.c.st.ListTasks(ctx, store.TaskFilter{States: []state.Task{state.TaskPending, state.TaskRunning}, Limit: 5000})
	if err != nil {
		r.cfg.logf("list open tasks: %v", err)
		return nil // the store may be busy: next time
	}
	steps, err := r.openSteps(ctx)
	if err != nil {
		r.cfg.logf("list open tasks' steps: %v", err)
		return nil
	}
	env := Env{Now: time.Now(), Paused: r.paused, Limited: r.limited, RemoteServed: time.Now().After(r.remoteSilentUntil)}
	// Read after the tasks: a holder that died between the two reads shows
	// for this look only, as the next reads its step again.
	if engines, err := r.c.st.ListEngines(ctx); err != nil {
		r.cfg.logf("list engines: %v", err)
	} else {
		env.Live = make(map[string]bool, len(engines))
		for _, e := range engines {
			env.Live[e.ID] = true
		}
	}
	r.open = r.open[:0]
	r.waiting = r.waiting[:0]
	var obs []TaskWait
	running := 0 // local steps running: the engines' slots they take
	read := make(map[int64]*store.Task, len(open))
	for _, lt := range open {
		t := r.read[lt.ID]
		if t == nil || mark(t) != taskMark(&lt)+steps[lt.ID] {
			t, err = r.c.st.GetTask(ctx, lt.ID)
			if errors.Is(err, store.ErrNotFound) {
				continue
			}
			if err != nil {
				r.cfg.logf("get task %d: %v", lt.ID, err)
				return nil
			}
		}
		read[lt.ID] = t
		r.see(seen(t), false)
		for _, s := range t.Steps {
			if err := r.ids.Step(s.ID, t.ID, s.Name); err != nil {
				r.violate(InvIDReuse, "%v", err)
			}
			if s.State == state.StepRunning && s.Handler != "remote.work" {
				running++
			}
		}
		if !t.State.Terminal() {
			r.open = append(r.open, t.ID)
		}
		for _, s := range t.Steps {
			if s.Kind == store.KindSignal && s.State == state.StepWaiting {
				r.waiting = append(r.waiting, t.ID)
				break
			}
		}
		if msg := TaskStateAgrees(t); msg != "" {
			r.violate(InvTaskState, "%s", msg)
		}
		obs = append(obs, Classify(t, env))
	}
	r.read = read
	// Quiet: every open task waits for something that does not pass by
	// itself (a signal, a pause, a limit): nothing more will happen.
	r.quiet = true
	for _, o := range obs {
		if o.Reason != "signal" && o.Reason != "paused" && o.Reason != "limited" {
			r.quiet = false
		}
	}
	observe := r.waits.Observe
	if r.saturated(running) {
		observe = r.waits.ObserveSaturated
	}
	for _, v := range observe(env.Now, obs) {
		r.violate(v.Invariant, "%s", v.Detail)
	}
	return nil
}

// The marks of an open task: what of its row and its steps Classify and
// the id checks read and can change. A task read earlier (GetTask) whose
// mark is the one openSteps and ListTasks give now has not changed since.
func taskMark(t *store.Task) string {
	return fmt.Sprintf("%s %d %d|", t.State, t.RunAt.UnixMicro(), t.CreatedAt.UnixMicro())
}

func stepMark(id int64, name, st string, attempt int, runAt int64) string {
	return fmt.Sprintf("%d %s %s %d %d;", id, name, st, attempt, runAt)
}

func mark(t *store.Task) string {
	var b strings.Builder
	b.WriteString(taskMark(t))
	for _, s := range t.Steps {
		var runAt int64
		if s.RunAt != nil {
			runAt = s.RunAt.UnixMicro()
		}
		b.WriteString(stepMark(s.ID, s.Name, string(s.State), s.Attempts, runAt))
	}
	return b.String()
}

// openSteps returns, in one query, the marks of the steps of every open
// task, by task, in the order GetTask lists them.
func (r *runner) openSteps(ctx context.Context) (map[int64]string, error) {
	rows, err := r.c.db.QueryContext(ctx, `SELECT s.task_id, s.id, s.name, s.state, s.attempt, COALESCE(s.run_at, 0)
		FROM steps s JOIN tasks t ON t.id = s.task_id
		WHERE t.state IN ('`+string(state.TaskPending)+`', '`+string(state.TaskRunning)+`') ORDER BY s.task_id, s.idx`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[int64]string{}
	for rows.Next() {
		var task, id, runAt int64
		var attempt int
		var name, st string
		if err := rows.Scan(&task, &id, &name, &st, &attempt, &runAt); err != nil {
			return nil, err
		}
		out[task] += stepMark(id, name, st, attempt, runAt)
	}
	return out, rows.Err()
}

// saturated reports whether running local steps take all but one of
// the slots of the live engines (weft serve's and the workers' not
// stopping): a ready step then waits for a slot.
func (r *runner) saturated(running int) bool {
	slots := serveConcurrency + workerConcurrency*len(r.c.liveWorkers())
	return running+1 >= slots
}

// refreshTargets lists the tasks and steps that operator actions on
// failed or ended work pick from, as they are now: each such action calls
// it before it picks.
func (r *runner) refreshTargets(ctx context.Context) {
	failed, err := r.c.st.ListTasks(ctx, store.TaskFilter{States: []state.Task{state.TaskFailed}, Limit: 50})
	if err == nil {
		r.failed = r.failed[:0]
		r.failedSteps = r.failedSteps[:0]
		for _, t := range failed {
			r.failed = append(r.failed, t.ID)
		}
		for _, id := range r.failed[:min(len(r.failed), 10)] {
			if t, err := r.c.st.GetTask(ctx, id); err == nil {
				for _, s := range t.Steps {
					if s.State == state.StepFailed {
						r.failedSteps = append(r.failedSteps, s.ID)
					}
				}
			}
		}
	}
	ended, err := r.c.st.ListTasks(ctx, store.TaskFilter{States: []state.Task{state.TaskCompleted, state.TaskCancelled}, Limit: 50})
	if err == nil {
		r.ended = r.ended[:0]
		for _, t := range ended {
			r.ended = append(r.ended, t.ID)
		}
	}
}

// checkEnd checks, at the end, the audit trail of every task that ended
// and the REST listing against the model.
func (r *runner) checkEnd(ctx context.Context) error {
	listed := map[int64]bool{}
	cursor := ""
	for {
		path := "/v1/tasks?limit=500"
		if cursor != "" {
			path += "&cursor=" + url.QueryEscape(cursor)
		}
		var page struct {
			Tasks      []wire.Task `json:"tasks"`
			NextCursor string      `json:"next_cursor"`
		}
		st, err := r.rest(ctx, "GET", path, nil, &page)
		if err != nil {
			return fmt.Errorf("list tasks: %d %w", st, err)
		}
		for _, t := range page.Tasks {
			listed[t.ID] = true
			r.see(taskSeen{t.ID, t.Namespace, t.Workflow, t.CreatedAt}, false)
			if t.State.Terminal() {
				if err := r.checkAudit(ctx, t.ID); err != nil {
					return err
				}
			}
		}
		if page.NextCursor == "" || len(page.Tasks) == 0 {
			break
		}
		cursor = page.NextCursor
	}
	for _, id := range r.order {
		m := r.tasks[id]
		if m.root && !m.gone && !listed[id] {
			r.violate(InvCounts, "task %d (%s) was submitted and never deleted, and GET /v1/tasks does not list it", id, m.workflow)
		}
		if m.gone && listed[id] {
			r.violate(InvCounts, "task %d (%s) was deleted, and GET /v1/tasks still lists it", id, m.workflow)
		}
	}
	return nil
}

func (r *runner) checkAudit(ctx context.Context, id int64) error {
	t, err := r.c.st.GetTask(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	audit, err := r.c.st.Audit(ctx, id)
	if err != nil {
		return err
	}
	for _, p := range AuditAgrees(t, audit) {
		r.violate(InvAudit, "%s", p)
	}
	return nil
}

func pick[T any](xs []T, arg uint32) (T, bool) {
	var zero T
	if len(xs) == 0 {
		return zero, false
	}
	return xs[int(arg%uint32(len(xs)))], true
}
