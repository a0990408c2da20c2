package main

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/store/postgres"
)

// The cluster scenario: engine processes (1, 2, 4 and 8, or -engines)
// on one PostgreSQL database, each this program run again with
// -cluster-engine (a process of its own, as engines are deployed),
// burning down one-step tasks queued before they start, then (weft)
// running fanout5 workflows submitted while they run. River's clients,
// in processes of their own too, burn down the same count of no-op jobs.
// At each size it measures the throughput; the CPU a unit of the
// database's processes (on this machine) and of the engines'; how many
// of the database's sessions wait on a lock (sampled); and, where
// pg_stat_statements is loaded, the claim statement's mean and longest
// time, the statements and buffers a unit, and the statements that took
// the most time.

func weftCluster(ctx context.Context, e *env, n int, o options) (sample, error) {
	return cluster(ctx, e, n, o, "weft", o.kinds)
}

// riverCluster is the cluster scenario's burn-down with River's clients:
// River has no workflows.
func riverCluster(ctx context.Context, e *env, n int, o options) (sample, error) {
	return cluster(ctx, e, n, o, "river", []string{"single"})
}

// cluster runs each kind of work with each engine count of -engines,
// engines of system.
func cluster(ctx context.Context, e *env, n int, o options, system string, kinds []string) (sample, error) {
	if e.backend != "postgres" {
		return sample{}, errors.New("cluster runs engines on one PostgreSQL database: use -backend postgres")
	}
	s := sample{metrics: map[string]float64{}}
	for _, k := range o.sizes {
		for _, kind := range kinds {
			units := n
			if kind == "fanout5" {
				units = n / 5
			}
			fmt.Fprintf(os.Stderr, "bench: cluster %d %s engine(s), %s\n", k, system, kind)
			m, err := clusterRun(ctx, e, o, system, k, kind, units)
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

// parseEngines reads -engines: engine counts from 1 to 32, comma-separated.
func parseEngines(list string) ([]int, error) {
	var sizes []int
	for _, f := range strings.Split(list, ",") {
		k, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || k < 1 || k > 32 {
			return nil, fmt.Errorf("-engines %q: %q is not an engine count from 1 to 32", list, f)
		}
		sizes = append(sizes, k)
	}
	return sizes, nil
}

// parseClusterWork reads -work: single, fanout5 or both, comma-separated.
func parseClusterWork(list string) ([]string, error) {
	var kinds []string
	for _, f := range strings.Split(list, ",") {
		f = strings.TrimSpace(f)
		if f != "single" && f != "fanout5" {
			return nil, fmt.Errorf("-work %q: %q is not single or fanout5", list, f)
		}
		kinds = append(kinds, f)
	}
	return kinds, nil
}

// clusterWork is one run's database and work: its statements' counter
// (which names the database), what to submit while the engines run (nil:
// the work was queued before), the queries that tell whether any unit is
// left and count completed units, and the claim statement's pattern in
// pg_stat_statements.
type clusterWork struct {
	count      queryCounter
	submit     func(ctx context.Context) error
	unfinished string
	completed  string
	claim      string
	close      func()
}

// weftClusterWork is a fresh database with units of kind for weft: one-
// step tasks queued, or fanout5 workflows submitted 100 a call while the
// engines run, by an engine that is never started.
func weftClusterWork(ctx context.Context, e *env, kind string, units int) (clusterWork, error) {
	wf, ref := oneStep(), "bench/one"
	if kind == "fanout5" {
		wf, ref = fanout5(), "bench/fanout5"
	}
	r, err := openWeft(ctx, e, wf, nil)
	if err != nil {
		return clusterWork{}, err
	}
	w := clusterWork{
		count:      r.count,
		unfinished: `SELECT EXISTS (SELECT 1 FROM tasks WHERE state IN ('pending', 'running'))`,
		completed:  `SELECT count(*) FROM tasks WHERE state = 'completed'`,
		claim:      `%attempt = attempt + $%, lease_id = $%`,
		close:      r.close,
	}
	if kind == "fanout5" {
		w.submit = func(ctx context.Context) error { return submitMany(ctx, r.engine, ref, units, 100) }
		return w, nil
	}
	if err := submitMany(ctx, r.engine, ref, units, submitBatch); err != nil {
		r.close()
		return clusterWork{}, err
	}
	return w, nil
}

// riverClusterWork is a fresh database of River's schema with units
// no-op jobs queued, by a client that is never started.
func riverClusterWork(ctx context.Context, e *env, units int) (clusterWork, error) {
	r, err := openRiver(ctx, e, func() {})
	if err != nil {
		return clusterWork{}, err
	}
	if err := insertNoops(ctx, r.ops, units); err != nil {
		r.close()
		return clusterWork{}, err
	}
	return clusterWork{
		count:      r.count,
		unfinished: `SELECT EXISTS (SELECT 1 FROM river_job WHERE state IN ('available', 'running'))`,
		completed:  `SELECT count(*) FROM river_job WHERE state = 'completed'`,
		claim:      `%locked_jobs%`,
		close:      r.close,
	}, nil
}

// clusterRun runs k engine processes of system on a fresh database until
// units of kind (one-step tasks queued before, or fanout5 workflows
// submitted 100 per call while they run) have completed.
func clusterRun(ctx context.Context, e *env, o options, system string, k int, kind string, units int) (map[string]float64, error) {
	var w clusterWork
	var err error
	if system == "river" {
		w, err = riverClusterWork(ctx, e, units)
	} else {
		w, err = weftClusterWork(ctx, e, kind, units)
	}
	if err != nil {
		return nil, err
	}
	defer w.close()
	poll, err := pgxpool.New(ctx, w.count.db.url)
	if err != nil {
		return nil, fmt.Errorf("connect to the bench database: %w", err)
	}
	defer poll.Close()
	engines, err := startEngines(ctx, w.count.db.url, system, o, k)
	defer engines.stop()
	if err != nil {
		return nil, err
	}
	s0, _, err := w.count.counts(ctx, true)
	if err != nil {
		return nil, err
	}
	cpu0, err := postgresCPU()
	if err != nil {
		return nil, err
	}
	engineCPU0 := engines.cpu()
	sampling, stopSampling := context.WithCancel(ctx)
	waits := make(chan lockWaits, 1)
	go func() { waits <- sampleLockWaits(sampling, e, w.count.db.name) }()
	start := time.Now()
	if err := engines.start(); err != nil {
		stopSampling()
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "bench: cluster %d %s engine(s), %s: started\n", k, system, kind)
	if w.submit != nil {
		if err := w.submit(ctx); err != nil {
			stopSampling()
			return nil, err
		}
	}
	err = waitDone(ctx, poll, w)
	elapsed := time.Since(start).Seconds()
	stopSampling()
	waited := <-waits
	if err != nil {
		return nil, err
	}
	cpu1, err := postgresCPU()
	if err != nil {
		return nil, err
	}
	engineCPU := engines.cpu() - engineCPU0
	m := map[string]float64{
		"per_s":                  float64(units) / elapsed,
		"db_cores":               (cpu1 - cpu0) / elapsed,
		"engine_cores":           engineCPU / elapsed,
		"db_cpu_us_per_unit":     1e6 * (cpu1 - cpu0) / float64(units),
		"engine_cpu_us_per_unit": 1e6 * engineCPU / float64(units),
	}
	if waited.samples > 0 {
		m["lock_waits"] = float64(waited.sum) / float64(waited.samples)
	}
	fmt.Fprintf(os.Stderr, "bench: cluster %d %s engine(s), %s: most lock waits: %s\n", k, system, kind, waited.top())
	if e.pgss {
		var mean, longest float64
		err := e.admin.QueryRow(ctx, `SELECT COALESCE(sum(total_exec_time) / NULLIF(sum(calls), 0), 0), COALESCE(max(max_exec_time), 0)
			FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = $1)
				AND query LIKE $2`, w.count.db.name, w.claim).Scan(&mean, &longest)
		if err != nil {
			return nil, fmt.Errorf("claim statements: %w", err)
		}
		m["claim_mean_ms"], m["claim_max_ms"] = mean, longest
		s1, _, err := w.count.counts(ctx)
		if err != nil {
			return nil, err
		}
		m["stmts_per_unit"] = (s1 - s0) / float64(units)
		top, err := w.count.topStatements(ctx, math.MaxInt32)
		if err != nil {
			return nil, err
		}
		var ms, buffers float64
		for _, st := range top {
			ms += st.TotalMS
			buffers += float64(st.Buffers)
		}
		m["db_exec_us_per_unit"], m["buffers_per_unit"] = 1000*ms/float64(units), buffers/float64(units)
		fmt.Fprintf(os.Stderr, "bench: cluster %d %s engine(s), %s: the database's time by statement:\n%s", k, system, kind, byTime(top, 8))
	}
	var done int
	if err := poll.QueryRow(ctx, w.completed).Scan(&done); err != nil {
		return nil, fmt.Errorf("count completed units: %w", err)
	}
	if done != units {
		return nil, fmt.Errorf("%d of %d units completed", done, units)
	}
	return m, nil
}

// byTime lists the n statements of top that took the most time, with
// their calls, and each call's time, rows and buffers.
func byTime(top []statementStat, n int) string {
	top = slices.Clone(top)
	slices.SortFunc(top, func(a, b statementStat) int { return cmp.Compare(b.TotalMS, a.TotalMS) })
	var out strings.Builder
	for _, st := range top[:min(n, len(top))] {
		calls := float64(max(st.Calls, 1))
		fmt.Fprintf(&out, "  %8.0f ms %7d calls %7.3f ms each %6.1f rows %7.0f buffers each  %.80s\n",
			st.TotalMS, st.Calls, st.TotalMS/calls, float64(st.Rows)/calls, float64(st.Buffers)/calls, st.Query)
	}
	return out.String()
}

// waitDone polls the database until the work w describes is done. Each
// poll asks whether any unit is left, which an index answers at once:
// counting the completed units at every poll would read a table as large
// as the run, and the database would spend a good part of its time on
// the bench.
func waitDone(ctx context.Context, db *pgxpool.Pool, w clusterWork) error {
	deadline := time.Now().Add(10 * time.Minute)
	for {
		var left bool
		if err := db.QueryRow(ctx, w.unfinished).Scan(&left); err != nil {
			return fmt.Errorf("look for unfinished units: %w", err)
		}
		if !left {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("units still unfinished after 10 minutes")
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
	var seconds float64
	for _, d := range dirs {
		comm, err := os.ReadFile(filepath.Join(d, "comm"))
		if err != nil || strings.TrimSpace(string(comm)) != "postgres" {
			continue
		}
		seconds += procCPU(d)
	}
	return seconds, nil
}

// procCPU is the CPU time, in seconds, of the process whose /proc
// directory is dir (0 where it is gone).
func procCPU(dir string) float64 {
	stat, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return 0
	}
	// Fields after the command's closing parenthesis: utime and stime
	// are the 12th and 13th.
	_, rest, ok := strings.Cut(string(stat), ") ")
	if !ok {
		return 0
	}
	f := strings.Fields(rest)
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return float64(u+s) / 100 // USER_HZ
}

// engineProcs are the engine processes of one run.
type engineProcs struct {
	cmds []*exec.Cmd
	ins  []io.WriteCloser
}

// startEngines runs k engine processes of system on url, with o's
// settings, and waits until each is ready to start.
func startEngines(ctx context.Context, url, system string, o options, k int) (*engineProcs, error) {
	p := &engineProcs{}
	self, err := os.Executable()
	if err != nil {
		return p, err
	}
	for range k {
		cmd := exec.CommandContext(ctx, self, "-cluster-engine", url, "-systems", system,
			"-river-fetch-cooldown", o.riverCooldown.String(), "-conns", strconv.Itoa(o.conns))
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

// cpu is the CPU time, in seconds, the engine processes used so far.
func (p *engineProcs) cpu() float64 {
	var seconds float64
	for _, cmd := range p.cmds {
		seconds += procCPU(fmt.Sprintf("/proc/%d", cmd.Process.Pid))
	}
	return seconds
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
// url, says "ready", starts on "go" and stops when its stdin closes. Its
// engine is weft's, or River's client where o.systems is river, on
// o.conns connections.
func clusterEngine(url string, o options) error {
	ctx := context.Background()
	var start, stop func(context.Context) error
	if o.systems == "river" {
		cfg, err := pgxpool.ParseConfig(url)
		if err != nil {
			return err
		}
		cfg.MaxConns = int32(o.conns)
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			return fmt.Errorf("open River's pool: %w", err)
		}
		defer pool.Close()
		c, err := riverWorkerClient(riverpgxv5.New(pool), o.riverCooldown, func() {})
		if err != nil {
			return err
		}
		start, stop = c.start, c.stop
	} else {
		s, err := postgres.Open(ctx, url, postgres.Options{MaxConns: o.conns, Logger: quiet})
		if err != nil {
			return fmt.Errorf("open weft store: %w", err)
		}
		defer s.Close()
		eng, err := weft.New(s, weft.Config{Concurrency: workerConcurrency, Logger: quiet})
		if err != nil {
			return err
		}
		eng.Handle("noop", noop)
		start, stop = eng.Start, eng.Stop
	}
	fmt.Println("ready")
	in := bufio.NewReader(os.Stdin)
	if line, err := in.ReadString('\n'); err != nil || line != "go\n" {
		return fmt.Errorf("want go on stdin, got %q (%v)", line, err)
	}
	if err := start(ctx); err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, in) // until stdin closes
	return stop(ctx)
}
