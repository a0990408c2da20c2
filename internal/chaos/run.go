package chaos

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"syscall"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/internal/weftproc"
	"github.com/weftrun/weft/store"
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
	// The workload's files (setup.go), and the first chaos/remote task.
	script, mixTpl, longTpl string
	remoteFirst             int64
	closers                 []func() // what r.close undoes (setup.go)
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
	defer r.close()
	if err := r.setup(ctx); err != nil {
		return res, err
	}
	if cfg.Serve {
		if err := r.startServe(ctx); err != nil {
			return res, err
		}
	}
	if err := r.startWorkers(ctx); err != nil {
		return res, err
	}

	// The CLI registers the workflows and submits a first task of each.
	first, err := r.submitFile(ctx, r.mixTpl, "--input", `{"n": 0}`)
	if err != nil {
		return res, err
	}
	longFirst, err := r.submitFile(ctx, r.longTpl)
	if err != nil {
		return res, err
	}
	submitted := []int64{first}
	if r.remoteFirst != 0 {
		submitted = append(submitted, r.remoteFirst)
	}
	submitted = append(submitted, longFirst)

	faults := r.faults()
	res.Faults = map[string]int{}
	res.ByFault = map[string][]time.Duration{}
	unsignalled := []int64{first}
	for cycle := 1; cycle <= cfg.Cycles; cycle++ {
		// The previous cycle's tasks are waiting for their signal by now
		// (or will take it when they begin to wait).
		if err := r.signal(ctx, unsignalled, cycle); err != nil {
			return res, err
		}
		ids, err := r.submitCycle(ctx, cycle)
		if err != nil {
			return res, fmt.Errorf("cycle %d: submit: %w", cycle, err)
		}
		submitted = append(submitted, ids...)
		unsignalled = ids[:min(len(ids), cfg.TasksPerCycle)] // the remote task waits for no signal

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
	if err := r.signal(ctx, unsignalled, cfg.Cycles+1); err != nil {
		return res, err
	}
	submitted = append(submitted, r.extra...)

	report, err := r.check(ctx, submitted)
	if err != nil {
		return res, err
	}
	res.Report = report
	if !res.OK() {
		// The processes' logs first, the findings last: a log that is cut
		// to its tail (CI's) still shows what was found.
		for _, w := range r.workers {
			if !w.Exited() {
				_ = w.Signal(syscall.SIGTERM)
				_ = w.Wait()
			}
		}
		for _, w := range append(r.retired, r.workers...) {
			r.logf("worker %d stderr (tail):\n%s", w.PID(), w.Tail(20))
		}
		if r.srv != nil {
			r.logf("serve %d stderr (tail):\n%s", r.srv.PID(), r.srv.Tail(30))
		}
	}
	for _, d := range res.Report.Details {
		r.logf("%s", d)
	}
	return res, nil
}

// faults lists the faults the run may inject, in a fixed order (the seed
// picks from it).
func (r *runner) faults() []string {
	faults := []string{FaultKillWorker, FaultRollingRestart}
	if r.cfg.Serve {
		faults = append(faults, FaultKillServe)
	}
	if r.volume != "" {
		faults = append(faults, FaultFillDisk)
	}
	if r.cfg.Store == "postgres" {
		faults = append(faults, FaultTerminatePG)
		if r.cfg.PGDir != "" {
			faults = append(faults, FaultRestartPG)
		}
	}
	return faults
}

// startWorkers starts the worker processes and waits until every engine
// (the server's too) is live.
func (r *runner) startWorkers(ctx context.Context) error {
	for range r.cfg.Workers {
		if err := r.startWorker(); err != nil {
			return err
		}
	}
	r.onClose(r.stopWorkers)
	pids := r.pids()
	if r.cfg.Serve {
		pids = append(pids, r.srv.PID()) // the server's own engine
	}
	if err := r.waitLive(ctx, pids); err != nil {
		for _, w := range r.workers {
			w.Kill()
			r.logf("worker stderr:\n%s", w.Tail(10))
		}
		return err
	}
	return nil
}

// submitCycle submits a cycle's tasks: TasksPerCycle of chaos/mix, then
// (with Config.Serve) one of chaos/remote. It returns their ids in order.
func (r *runner) submitCycle(ctx context.Context, cycle int) ([]int64, error) {
	subs := make([]weft.Submission, r.cfg.TasksPerCycle)
	for i := range subs {
		subs[i] = weft.Submission{Workflow: "chaos/mix", Input: map[string]int{"cycle": cycle, "i": i}}
	}
	if r.cfg.Serve {
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
	return ids, err
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
