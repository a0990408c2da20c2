package chaos

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/internal/weftproc"
	"github.com/weftrun/weft/internal/wireworker"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/weftdb"
)

// Config is one chaos run.
type Config struct {
	Store  string // "sqlite" or "postgres"
	DB     string // postgres: an existing server; "" starts one with scripts/pgtest
	PGDir  string // postgres: the scripts/pgtest directory of DB, for restarts
	Cycles int
	Seed   uint64
	// Root is the repository (for go build and scripts/pgtest).
	Root          string
	Workers       int           // worker processes (default 3)
	TasksPerCycle int           // tasks submitted per cycle (default 4)
	Deadline      time.Duration // for every task to end after the last cycle (default 2m)
	// Serve adds a `weft serve` with a remote worker attached (wire
	// protocol) that runs one task per cycle, and the kill-serve fault.
	Serve bool
	Log   io.Writer
}

// Fault names.
const (
	FaultKillWorker  = "kill-worker"
	FaultRestartPG   = "restart-postgres"
	FaultTerminatePG = "terminate-backends"
	// FaultFillDisk fills the small volume that holds the SQLite file (a
	// size-limited tmpfs, mounted when the run may mount one) for a moment,
	// then frees it: every write fails with "database or disk is full"
	// meanwhile, and must succeed again afterwards.
	FaultFillDisk = "fill-disk"
	// FaultRollingRestart stops each worker in turn with SIGTERM, as a
	// deploy does, while steps longer than the workers' lease run, and
	// starts a new one in its place: a draining worker keeps its steps, so
	// none runs in two places at once.
	FaultRollingRestart = "rolling-restart"
)

// The workers' lease for the rolling restarts, set through WEFT_LEASE_TTL
// and WEFT_HEARTBEAT_INTERVAL where the CLI reads them. The long steps
// work for two leases: an engine that stopped heartbeating when told to
// stop would have its steps reaped and run elsewhere while it still ran
// them. The lease outlasts the database faults (a heartbeat that fails
// is retried after 1 s, then 2 s).
const (
	chaosLeaseTTL  = 5 * time.Second
	chaosHeartbeat = time.Second
	longStep       = 2 * chaosLeaseTTL
)

// volumeSize is the size of the tmpfs that holds the SQLite file: large
// enough for the run's database and its WAL, small enough to fill at once.
const volumeSize = "96m"

// Result is what a run found.
type Result struct {
	Report
	Cycles   int
	Faults   map[string]int
	Recovery []time.Duration // one per fault, in order
	ByFault  map[string][]time.Duration
}

// step is the command of every exec step: it appends "TASK STEP ATTEMPT
// PID" (PID: the worker running it) to the ledger ($1) when it starts and
// the same with "end" when it exits (not when it is killed), and works in
// between. a fails its first attempt on purpose (a retry); split is the
// batch step (three items); the items work 0.2-0.6 s; long (the rolling
// restarts' work) works $2 seconds, longer than the workers' lease; d reads
// its context.
const stepScript = `echo "$WEFT_TASK_ID $WEFT_STEP $WEFT_ATTEMPT $PPID" >> "$1"
trap 'echo "$WEFT_TASK_ID $WEFT_STEP $WEFT_ATTEMPT $PPID end" >> "$1"' EXIT
case $WEFT_STEP in
a)
	if [ "$WEFT_ATTEMPT" = 1 ]; then echo "first attempt fails on purpose" >&2; exit 1; fi
	sleep 0.1 ;;
split) printf '{"batches": [1, 2, 3]}\n'; exit 0 ;;
d) cat >/dev/null ;;
long) sleep "$2" ;;
*) sleep "0.$((2 + WEFT_TASK_ID % 5))" ;;
esac
printf '{"step": "%s", "task": %s}\n' "$WEFT_STEP" "$WEFT_TASK_ID"
`

// longTemplate is the work of the rolling restarts: one step that works
// longer than the workers' lease.
const longTemplate = `namespace: chaos
name: long
version: "1"
steps:
  - name: long
    handler: exec
    retry: {max_attempts: 20, backoff: fixed, initial: 20ms}
    config: {command: ["/bin/sh", %[1]q, %[2]q, %[3]q]}
`

const template = `namespace: chaos
name: mix
version: "1"
templates:
  - name: item
    handler: exec
    retry: {max_attempts: 20, backoff: fixed, initial: 20ms}
    config: {command: ["/bin/sh", %[1]q, %[2]q]}
steps:
  - name: a
    handler: exec
    retry: {max_attempts: 20, backoff: fixed, initial: 20ms}
    config: {command: ["/bin/sh", %[1]q, %[2]q]}
  - name: split
    type: batch
    worker: item
    handler: exec
    depends_on: [a]
    retry: {max_attempts: 20, backoff: fixed, initial: 20ms}
    config: {command: ["/bin/sh", %[1]q, %[2]q]}
  - name: approve
    type: signal
    signal: {name: go, timeout: 30m}
    depends_on: [a]
  - name: d
    handler: exec
    depends_on: [split, approve]
    priority: 1
    retry: {max_attempts: 20, backoff: fixed, initial: 20ms}
    config: {command: ["/bin/sh", %[1]q, %[2]q]}
`

type runner struct {
	cfg     Config
	rng     *rand.Rand
	dir     string
	bin     string // the weft CLI, with the chaos lease when it takes one
	ledger  string
	extra   []int64 // tasks the faults submitted (rolling restarts)
	url     string  // what the workers use
	appName string  // postgres: the workers' application_name
	st      store.Store
	db      *sql.DB
	eng     *weft.Engine
	workers []*weftproc.Proc // not stopped by the run (workers.go)
	retired []*weftproc.Proc // stopped or killed by the run
	srv     *weftproc.Proc   // weft serve, with Config.Serve
	srvAddr string
	volume  string // sqlite: the size-limited tmpfs the database lives on, if any
	logf    func(string, ...any)
}

// Run runs the chaos program and returns what it found. An error means the
// run itself could not proceed (not a finding).
func Run(ctx context.Context, cfg Config) (res Result, err error) {
	if cfg.Workers <= 0 {
		cfg.Workers = 3
	}
	if cfg.TasksPerCycle <= 0 {
		cfg.TasksPerCycle = 4
	}
	if cfg.Deadline <= 0 {
		cfg.Deadline = 2 * time.Minute
	}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	r := &runner{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15))}
	r.logf = func(f string, a ...any) { fmt.Fprintf(cfg.Log, "chaos: "+f+"\n", a...) }
	r.dir, err = os.MkdirTemp("", "weft-chaos-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(r.dir)

	if r.bin, err = weftproc.Build(ctx, cfg.Root, r.dir); err != nil {
		return res, err
	}
	long, err := r.shortLease(ctx)
	if err != nil {
		return res, err
	}

	var ownURL, schema string
	if cfg.Store == "postgres" && cfg.DB == "" && cfg.PGDir != "" {
		return res, errors.New("a PostgreSQL directory without its server's URL")
	}
	switch cfg.Store {
	case "sqlite":
		r.url = filepath.Join(r.dir, "chaos.db")
		if vol, unmount, err := mountVolume(r.dir); err == nil {
			defer unmount()
			r.volume = vol
			r.url = filepath.Join(vol, "chaos.db")
		} else {
			r.logf("no small volume for the disk-full fault (%v): it is not injected", err)
		}
		ownURL = r.url
	case "postgres":
		if cfg.DB == "" {
			stop, err := r.startCluster(ctx)
			if err != nil {
				return res, err
			}
			defer stop()
			cfg = r.cfg
		}
		schema = fmt.Sprintf("chaos_%d_%d", cfg.Seed, time.Now().UnixNano()%1e9)
		r.appName = "weft_" + schema
		ownURL = weftproc.WithParam(cfg.DB, "search_path", schema)
		r.url = weftproc.WithParam(ownURL, "application_name", r.appName)
	default:
		return res, fmt.Errorf("--store must be sqlite or postgres, not %q", cfg.Store)
	}

	// The schema is applied here, before any engine works (applying it while
	// engines work can deadlock with them).
	r.st, err = weftdb.Open(ctx, ownURL, weftdb.Options{})
	if err != nil {
		return res, fmt.Errorf("open %s: %w", weftdb.Redact(ownURL), err)
	}
	defer r.st.Close()
	dbs, ok := r.st.(interface{ DB() *sql.DB })
	if !ok {
		return res, errors.New("the store exposes no *sql.DB")
	}
	r.db = dbs.DB()
	if schema != "" {
		// Runs before the store closes (deferred after it).
		defer func() {
			if _, err := r.db.ExecContext(context.Background(), `DROP SCHEMA `+schema+` CASCADE`); err != nil {
				r.logf("drop schema %s: %v", schema, err)
			}
		}()
	}
	r.eng, err = weft.New(r.st, weft.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return res, err
	}

	script := filepath.Join(r.dir, "step.sh")
	ledger := filepath.Join(r.dir, "ledger")
	r.ledger = ledger
	tpl := filepath.Join(r.dir, "mix.yaml")
	if err := os.WriteFile(script, []byte(stepScript), 0o644); err != nil {
		return res, err
	}
	if err := os.WriteFile(tpl, fmt.Appendf(nil, template, script, ledger), 0o644); err != nil {
		return res, err
	}
	longTpl := filepath.Join(r.dir, "long.yaml")
	longSecs := strconv.FormatFloat(long.Seconds(), 'f', -1, 64)
	if err := os.WriteFile(longTpl, fmt.Appendf(nil, longTemplate, script, ledger, longSecs), 0o644); err != nil {
		return res, err
	}

	faults := []string{FaultKillWorker, FaultRollingRestart}
	var remoteFirst int64
	if cfg.Serve {
		// Before the workers start: everything that opens the database
		// does it before there is work.
		out, err := exec.CommandContext(ctx, r.bin, "keys", "create", "--db", r.url, "--name", "chaos", "--permissions", "workers:connect").Output()
		if err != nil {
			return res, fmt.Errorf("weft keys create: %w", err)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		token := strings.TrimSpace(lines[len(lines)-1])
		addr, err := weftproc.FreeAddr()
		if err != nil {
			return res, err
		}
		r.srvAddr = addr
		r.srv = &weftproc.Proc{Name: "serve", Args: []string{"serve", "--db", r.url, "--addr", addr, "--concurrency", "4"}}
		if err := r.startServer(ctx); err != nil {
			return res, err
		}
		defer r.srv.Stop(15 * time.Second)
		rtpl := filepath.Join(r.dir, "remote.yaml")
		if err := os.WriteFile(rtpl, fmt.Appendf(nil, remoteTemplate, script, ledger), 0o644); err != nil {
			return res, err
		}
		out, err = exec.CommandContext(ctx, r.bin, "submit", rtpl, "--db", r.url).CombinedOutput()
		if err != nil {
			return res, fmt.Errorf("weft submit: %v\n%s", err, out)
		}
		if remoteFirst, err = strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64); err != nil {
			return res, fmt.Errorf("weft submit printed %q", out)
		}
		rw := &wireworker.Worker{Base: "http://" + addr, Token: token, Name: "chaos", Handler: "remote.work",
			Client: &http.Client{Timeout: 10 * time.Second}, Work: remoteWork(ledger)}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { rw.Run(rctx); close(done) }()
		defer func() {
			cancel()
			<-done
			if n := rw.Retries(); n > 0 {
				r.logf("the remote worker retried %d completions through server restarts", n)
			}
		}()
		faults = append(faults, FaultKillServe)
	}

	for range cfg.Workers {
		if err := r.startWorker(); err != nil {
			return res, err
		}
	}
	defer r.stopWorkers()
	engines := cfg.Workers
	if cfg.Serve {
		engines++ // the server's own engine
	}
	if err := r.waitLive(ctx, engines); err != nil {
		for _, w := range r.workers {
			w.Kill()
			r.logf("worker stderr:\n%s", w.Tail(10))
		}
		return res, err
	}

	// The CLI registers the template and submits the first task.
	out, err := exec.CommandContext(ctx, r.bin, "submit", tpl, "--db", r.url, "--input", `{"n": 0}`).CombinedOutput()
	if err != nil {
		return res, fmt.Errorf("weft submit: %v\n%s", err, out)
	}
	first, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	if err != nil {
		return res, fmt.Errorf("weft submit printed %q", out)
	}
	submitted := []int64{first}
	if remoteFirst != 0 {
		submitted = append(submitted, remoteFirst)
	}
	// The CLI registers the rolling restarts' workflow too, with a task.
	out, err = exec.CommandContext(ctx, r.bin, "submit", longTpl, "--db", r.url).CombinedOutput()
	if err != nil {
		return res, fmt.Errorf("weft submit: %v\n%s", err, out)
	}
	longFirst, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	if err != nil {
		return res, fmt.Errorf("weft submit printed %q", out)
	}
	submitted = append(submitted, longFirst)
	unsignalled := []int64{first}

	if r.volume != "" {
		faults = append(faults, FaultFillDisk)
	}
	res.Faults = map[string]int{}
	res.ByFault = map[string][]time.Duration{}
	if cfg.Store == "postgres" {
		faults = append(faults, FaultTerminatePG)
		if cfg.PGDir != "" {
			faults = append(faults, FaultRestartPG)
		}
	}
	for cycle := 1; cycle <= cfg.Cycles; cycle++ {
		// The previous cycle's tasks are waiting for their signal by now
		// (or will take it when they begin to wait).
		if err := r.signal(ctx, unsignalled, cycle); err != nil {
			return res, err
		}
		subs := make([]weft.Submission, cfg.TasksPerCycle)
		for i := range subs {
			subs[i] = weft.Submission{Workflow: "chaos/mix", Input: map[string]int{"cycle": cycle, "i": i}}
		}
		if cfg.Serve {
			subs = append(subs, weft.Submission{Workflow: "chaos/remote", Input: map[string]int{"cycle": cycle}})
		}
		var ids []int64
		err := retry(ctx, func() error {
			sr, err := r.eng.SubmitMany(ctx, subs)
			if err != nil {
				return err
			}
			ids = ids[:0]
			for _, s := range sr {
				ids = append(ids, s.Task.ID)
			}
			return nil
		})
		if err != nil {
			return res, fmt.Errorf("cycle %d: submit: %w", cycle, err)
		}
		submitted = append(submitted, ids...)
		unsignalled = unsignalled[:0]
		for i, id := range ids {
			if i < cfg.TasksPerCycle { // the remote task waits for no signal
				unsignalled = append(unsignalled, id)
			}
		}

		time.Sleep(time.Duration(100+r.rng.IntN(900)) * time.Millisecond)
		fault := faults[r.rng.IntN(len(faults))]
		rec, err := r.inject(ctx, fault)
		if err != nil {
			return res, fmt.Errorf("cycle %d: %s: %w", cycle, fault, err)
		}
		res.Faults[fault]++
		res.Recovery = append(res.Recovery, rec)
		res.ByFault[fault] = append(res.ByFault[fault], rec)
		res.Cycles = cycle
		r.logf("cycle %d: %s, recovered in %s", cycle, fault, rec.Round(time.Millisecond))
	}
	if d := res.ByFault[FaultRollingRestart]; len(d) > 0 {
		r.logf("%s: %d, every worker stopped with SIGTERM and replaced", FaultRollingRestart, len(d))
	}
	if err := r.signal(ctx, unsignalled, cfg.Cycles+1); err != nil {
		return res, err
	}
	submitted = append(submitted, r.extra...)

	report, err := r.check(ctx, submitted, ledger)
	if err != nil {
		return res, err
	}
	res.Report = report
	for _, d := range res.Report.Details {
		r.logf("%s", d)
	}
	if !res.OK() {
		for _, w := range r.workers {
			if !w.Exited() {
				_ = w.Signal(syscall.SIGTERM)
				_ = w.Wait()
			}
		}
		for _, w := range append(r.retired, r.workers...) {
			r.logf("worker %d stderr (tail):\n%s", w.PID(), w.Tail(20))
		}
	}
	return res, nil
}

// check waits (up to the deadline) for every submitted task to end, then
// compares what the database recorded of each with the ledger.
func (r *runner) check(ctx context.Context, submitted []int64, ledger string) (Report, error) {
	// Every task must end by the deadline.
	deadline := time.Now().Add(r.cfg.Deadline)
	for time.Now().Before(deadline) {
		var open int
		err := r.db.QueryRowContext(ctx, `SELECT count(*) FROM tasks WHERE state NOT IN ('completed', 'failed', 'cancelled', 'expired')`).Scan(&open)
		if err == nil && open == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}

	obs := map[int64]TaskObs{}
	for _, id := range submitted {
		var t *store.Task
		var audit []store.AuditEntry
		err := retry(ctx, func() (err error) {
			if t, err = r.st.GetTask(ctx, id); err != nil {
				return err
			}
			audit, err = r.st.Audit(ctx, id)
			return err
		})
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return Report{}, fmt.Errorf("task %d: %w", id, err)
		}
		o := TaskObs{State: t.State, Completions: map[string]int{}, Claims: map[string]int{}, RunEnds: map[string]int{}}
		for _, s := range t.Steps {
			o.Steps = append(o.Steps, StepObs{Name: s.Name, State: s.State, Ran: s.Kind != store.KindSignal})
		}
		for _, e := range audit {
			switch {
			case e.Step == "" && e.From == string(state.TaskPending) && e.To == string(state.TaskRunning):
				o.Starts++
			case e.Step == "":
			case e.From == string(state.StepReady) && e.To == string(state.StepRunning):
				o.Claims[e.Step]++
			case e.From == string(state.StepRunning):
				o.RunEnds[e.Step]++
			}
			if e.Step != "" && e.To == string(state.StepCompleted) {
				o.Completions[e.Step]++
			}
		}
		obs[id] = o
	}
	text, err := os.ReadFile(ledger)
	if err != nil {
		return Report{}, err
	}
	l, bad, err := ParseLedger(bytes.NewReader(text))
	if err != nil {
		return Report{}, err
	}
	if bad > 0 {
		r.logf("%d malformed ledger lines", bad)
	}
	overlaps, err := Overlaps(bytes.NewReader(text))
	if err != nil {
		return Report{}, err
	}
	for key, n := range overlaps {
		id, name, _ := strings.Cut(key, " ")
		tid, err := strconv.ParseInt(id, 10, 64)
		if err != nil {
			continue
		}
		if o, ok := obs[tid]; ok {
			if o.Overlaps == nil {
				o.Overlaps = map[string]int{}
			}
			o.Overlaps[name] += n
			obs[tid] = o
		}
	}
	return Check(submitted, obs, l), nil
}

// shortLease makes the workers' lease shorter than the long steps, for
// the rolling restarts: r.bin becomes a wrapper that sets it for every
// weft process of the run (the binary itself is not changed). It returns
// how long the long steps work. A CLI without engine.lease_ttl keeps its
// lease (30 s by default): the long steps then work for a second only,
// and rolling restarts check clean drains without a lease to outlast.
func (r *runner) shortLease(ctx context.Context) (time.Duration, error) {
	out, err := exec.CommandContext(ctx, r.bin, "config").CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("weft config: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "engine.lease_ttl") {
		r.logf("this weft takes no engine.lease_ttl: workers keep their default lease, long steps work 1s")
		return time.Second, nil
	}
	wrapper := filepath.Join(r.dir, "weft-chaos")
	script := fmt.Sprintf("#!/bin/sh\nWEFT_LEASE_TTL=%s WEFT_HEARTBEAT_INTERVAL=%s\nexport WEFT_LEASE_TTL WEFT_HEARTBEAT_INTERVAL\nexec %q \"$@\"\n",
		chaosLeaseTTL, chaosHeartbeat, r.bin)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		return 0, err
	}
	r.bin = wrapper
	r.logf("workers run with a %s lease; long steps work %s", chaosLeaseTTL, longStep)
	return longStep, nil
}

// retry runs f until it succeeds, for up to 60 s: the database may be
// restarting.
func retry(ctx context.Context, f func() error) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := f()
		if err == nil || errors.Is(err, store.ErrNotFound) || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (r *runner) signal(ctx context.Context, ids []int64, cycle int) error {
	for _, id := range ids {
		err := retry(ctx, func() error {
			_, err := r.eng.Signal(ctx, id, "go", map[string]int{"cycle": cycle})
			return err
		})
		if err != nil {
			return fmt.Errorf("signal task %d: %w", id, err)
		}
	}
	return nil
}

func placeholder(storeKind string) string {
	if storeKind == "postgres" {
		return "$1"
	}
	return "?"
}

