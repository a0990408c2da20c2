package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/store/postgres"
)

// The cluster scenario: 1, 2, 4 and 8 engine processes on one PostgreSQL
// database, each this program run again with -cluster-engine (a process
// of its own, as engines are deployed), burning down one-step tasks
// queued before they start, then running fanout5 workflows submitted
// while they run. At each size it measures the throughput, the database's
// CPU (its processes on this machine), how many of the database's
// sessions wait on a lock (sampled), and the claim statement's mean and
// longest time (pg_stat_statements, where loaded).

// clusterSizes are the engine counts the scenario runs.
var clusterSizes = []int{1, 2, 4, 8}

// clusterConns is each engine's connection pool: eight engines stay
// within a default max_connections of 100.
const clusterConns = 8

func weftCluster(ctx context.Context, e *env, n int, _ options) (sample, error) {
	if e.backend != "postgres" {
		return sample{}, errors.New("cluster runs engines on one PostgreSQL database: use -backend postgres")
	}
	s := sample{metrics: map[string]float64{}}
	for _, k := range clusterSizes {
		for _, kind := range []string{"single", "fanout5"} {
			units := n
			if kind == "fanout5" {
				units = n / 5
			}
			fmt.Fprintf(os.Stderr, "bench: cluster %d engine(s), %s\n", k, kind)
			m, err := clusterRun(ctx, e, k, kind, units)
			if err != nil {
				return sample{}, fmt.Errorf("%d engines, %s: %w", k, kind, err)
			}
			for name, v := range m {
				s.metrics[fmt.Sprintf("%s_%d_%s", kind, k, name)] = v
			}
			if kind == "single" {
				s.value = max(s.value, m["per_s"])
			}
		}
	}
	return s, nil
}

// clusterRun runs k engine processes on a fresh database until units of
// kind (one-step tasks queued before, or fanout5 workflows submitted 100
// per call while they run) have completed.
func clusterRun(ctx context.Context, e *env, k int, kind string, units int) (map[string]float64, error) {
	wf, ref := oneStep(), "bench/one"
	if kind == "fanout5" {
		wf, ref = fanout5(), "bench/fanout5"
	}
	// This engine submits and is never started: the k processes run.
	r, err := openWeft(ctx, e, wf, nil)
	if err != nil {
		return nil, err
	}
	defer r.close()
	if kind == "single" {
		if err := submitMany(ctx, r.engine, ref, units, submitBatch); err != nil {
			return nil, err
		}
	}
	engines, err := startEngines(ctx, r.db.url, k)
	defer engines.stop()
	if err != nil {
		return nil, err
	}
	if e.pgss {
		if _, err := e.admin.Exec(ctx, `SELECT pg_stat_statements_reset()`); err != nil {
			return nil, fmt.Errorf("reset pg_stat_statements: %w", err)
		}
	}
	cpu0, err := postgresCPU()
	if err != nil {
		return nil, err
	}
	sampling, stopSampling := context.WithCancel(ctx)
	waits := make(chan lockWaits, 1)
	go func() { waits <- sampleLockWaits(sampling, e, r.db.name) }()
	start := time.Now()
	if err := engines.start(); err != nil {
		stopSampling()
		return nil, err
	}
	if kind == "fanout5" {
		if err := submitMany(ctx, r.engine, ref, units, 100); err != nil {
			stopSampling()
			return nil, err
		}
	}
	err = waitCompleted(ctx, r.db.url, units)
	elapsed := time.Since(start).Seconds()
	stopSampling()
	w := <-waits
	if err != nil {
		return nil, err
	}
	cpu1, err := postgresCPU()
	if err != nil {
		return nil, err
	}
	m := map[string]float64{"per_s": float64(units) / elapsed, "db_cores": (cpu1 - cpu0) / elapsed}
	if w.samples > 0 {
		m["lock_waits"] = float64(w.sum) / float64(w.samples)
	}
	fmt.Fprintf(os.Stderr, "bench: cluster %d engine(s), %s: most lock waits: %s\n", k, kind, w.top())
	if e.pgss {
		var mean, longest float64
		err := e.admin.QueryRow(ctx, `SELECT COALESCE(sum(total_exec_time) / NULLIF(sum(calls), 0), 0), COALESCE(max(max_exec_time), 0)
			FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = $1)
				AND query LIKE '%attempt = attempt + $%, lease_id = $%'`, r.db.name).Scan(&mean, &longest)
		if err != nil {
			return nil, fmt.Errorf("claim statements: %w", err)
		}
		m["claim_mean_ms"], m["claim_max_ms"] = mean, longest
	}
	return m, nil
}

// waitCompleted polls the database at url until units tasks completed.
func waitCompleted(ctx context.Context, url string, units int) error {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return fmt.Errorf("connect to the bench database: %w", err)
	}
	defer pool.Close()
	deadline := time.Now().Add(10 * time.Minute)
	for {
		var done int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM tasks WHERE state = 'completed'`).Scan(&done); err != nil {
			return fmt.Errorf("count completed tasks: %w", err)
		}
		if done >= units {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d tasks completed in 10 minutes", done, units)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(25 * time.Millisecond):
		}
	}
}

// lockWaits is what sampleLockWaits saw: the sessions waiting on a lock,
// summed over the samples, and how often each statement waited (by its
// wait event and the start of its text).
type lockWaits struct {
	sum, samples int
	by           map[string]int
}

// sampleLockWaits samples, every 20 ms until ctx ends, the sessions on
// database name that wait for a lock.
func sampleLockWaits(ctx context.Context, e *env, name string) lockWaits {
	w := lockWaits{by: map[string]int{}}
	for ctx.Err() == nil {
		rows, err := e.admin.Query(ctx, `SELECT wait_event, left(regexp_replace(query, '\s+', ' ', 'g'), 90) FROM pg_stat_activity
			WHERE datname = $1 AND wait_event_type = 'Lock'`, name)
		if err == nil {
			for rows.Next() {
				var event, query string
				if rows.Scan(&event, &query) == nil {
					w.sum++
					w.by[event+": "+query]++
				}
			}
			rows.Close()
			if rows.Err() == nil {
				w.samples++
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
	return w
}

// top is the statement that waited most often, with its share of the
// waits.
func (w lockWaits) top() string {
	best, n := "", 0
	for k, v := range w.by {
		if v > n {
			best, n = k, v
		}
	}
	if n == 0 {
		return "none"
	}
	return fmt.Sprintf("%d%% %s", 100*n/w.sum, best)
}

// postgresCPU is the CPU time, in seconds, of this machine's PostgreSQL
// processes so far (0 where none runs here: a remote -db).
func postgresCPU() (float64, error) {
	dirs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		return 0, err
	}
	var ticks int64
	for _, d := range dirs {
		comm, err := os.ReadFile(filepath.Join(d, "comm"))
		if err != nil || strings.TrimSpace(string(comm)) != "postgres" {
			continue
		}
		stat, err := os.ReadFile(filepath.Join(d, "stat"))
		if err != nil {
			continue
		}
		// Fields after the command's closing parenthesis: utime and stime
		// are the 12th and 13th.
		_, rest, ok := strings.Cut(string(stat), ") ")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) < 13 {
			continue
		}
		u, _ := strconv.ParseInt(f[11], 10, 64)
		s, _ := strconv.ParseInt(f[12], 10, 64)
		ticks += u + s
	}
	return float64(ticks) / 100, nil // USER_HZ
}

// engineProcs are the engine processes of one run.
type engineProcs struct {
	cmds []*exec.Cmd
	ins  []io.WriteCloser
}

// startEngines runs k engine processes on url and waits until each is
// ready to start.
func startEngines(ctx context.Context, url string, k int) (*engineProcs, error) {
	p := &engineProcs{}
	self, err := os.Executable()
	if err != nil {
		return p, err
	}
	for range k {
		cmd := exec.CommandContext(ctx, self, "-cluster-engine", url)
		cmd.Stderr = os.Stderr
		in, err := cmd.StdinPipe()
		if err != nil {
			return p, err
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			return p, err
		}
		if err := cmd.Start(); err != nil {
			return p, fmt.Errorf("start an engine process: %w", err)
		}
		p.cmds, p.ins = append(p.cmds, cmd), append(p.ins, in)
		line, err := bufio.NewReader(out).ReadString('\n')
		if err != nil || line != "ready\n" {
			return p, fmt.Errorf("engine process %d: not ready (%q, %v)", cmd.Process.Pid, line, err)
		}
	}
	return p, nil
}

// start tells every engine to start.
func (p *engineProcs) start() error {
	for _, in := range p.ins {
		if _, err := io.WriteString(in, "go\n"); err != nil {
			return fmt.Errorf("start an engine: %w", err)
		}
	}
	return nil
}

// stop tells every engine to stop (its stdin closes) and waits for it.
func (p *engineProcs) stop() {
	for _, in := range p.ins {
		in.Close()
	}
	for _, cmd := range p.cmds {
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
}

// clusterEngine is one engine process of the cluster scenario: it opens
// url, says "ready", starts on "go" and stops when its stdin closes.
func clusterEngine(url string) error {
	ctx := context.Background()
	s, err := postgres.Open(ctx, url, postgres.Options{MaxConns: clusterConns, Logger: quiet})
	if err != nil {
		return fmt.Errorf("open weft store: %w", err)
	}
	defer s.Close()
	eng, err := weft.New(s, weft.Config{Concurrency: workerConcurrency, Logger: quiet})
	if err != nil {
		return err
	}
	eng.Handle("noop", noop)
	fmt.Println("ready")
	in := bufio.NewReader(os.Stdin)
	if line, err := in.ReadString('\n'); err != nil || line != "go\n" {
		return fmt.Errorf("want go on stdin, got %q (%v)", line, err)
	}
	if err := eng.Start(ctx); err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, in) // until stdin closes
	return eng.Stop(ctx)
}
