package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/store/postgres"
	"github.com/weftrun/weft/store/sqlite"
	"github.com/weftrun/weft/workflow"
)

// weftRun is one weft engine on a fresh database.
type weftRun struct {
	db     *database
	store  store.Store
	engine *weft.Engine
	count  queryCounter
}

// openWeft opens an engine, not started, on a fresh database with wf
// registered and, unless nil, h as its "noop" handler.
func openWeft(ctx context.Context, e *env, wf *workflow.Workflow, h weft.Handler) (_ *weftRun, err error) {
	db, err := e.fresh(ctx, "weft")
	if err != nil {
		return nil, err
	}
	var s store.Store
	if e.backend == "sqlite" {
		s, err = sqlite.Open(ctx, db.path, sqlite.Options{})
	} else {
		s, err = postgres.Open(ctx, db.url, postgres.Options{MaxConns: pgMaxConns, Logger: quiet})
	}
	if err != nil {
		db.drop()
		return nil, fmt.Errorf("open weft store: %w", err)
	}
	eng, err := weft.New(s, weft.Config{Concurrency: workerConcurrency, Logger: quiet})
	if err != nil {
		s.Close()
		db.drop()
		return nil, err
	}
	r := &weftRun{db: db, store: s, engine: eng, count: queryCounter{e: e, db: db}}
	if h != nil {
		eng.Handle("noop", h)
	}
	if wf != nil {
		if err := eng.Register(ctx, wf); err != nil {
			r.close()
			return nil, err
		}
	}
	return r, nil
}

func (r *weftRun) close() {
	_ = r.engine.Stop(context.Background())
	r.store.Close()
	r.db.drop()
}

// countdown closes done when it has been called n times.
type countdown struct {
	left atomic.Int64
	done chan struct{}
}

func newCountdown(n int) *countdown {
	c := &countdown{done: make(chan struct{})}
	c.left.Store(int64(n))
	return c
}

func (c *countdown) tick() {
	if c.left.Add(-1) == 0 {
		close(c.done)
	}
}

// handle is a no-op weft handler that ticks.
func (c *countdown) handle(context.Context, *weft.Attempt) (any, error) {
	c.tick()
	return nil, nil
}

func (c *countdown) wait(ctx context.Context) error {
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func oneStep() *workflow.Workflow { return workflow.New("bench", "one", "1").Step("s", "noop") }

// dag7 is a fan-out of three, a join, a chain of two and a final step.
func dag7() *workflow.Workflow {
	return workflow.New("bench", "dag7", "1").
		Step("a", "noop").Step("b", "noop").Step("c", "noop").
		Step("join", "noop", workflow.DependsOn("a", "b", "c")).
		Step("d", "noop", workflow.DependsOn("join")).
		Step("e", "noop", workflow.DependsOn("d")).
		Step("final", "noop", workflow.DependsOn("e"))
}

// chain7 is seven steps, each depending on the one before.
func chain7() *workflow.Workflow {
	w := workflow.New("bench", "chain7", "1").Step("s1", "noop")
	for i := 2; i <= 7; i++ {
		w.Step(fmt.Sprintf("s%d", i), "noop", workflow.DependsOn(fmt.Sprintf("s%d", i-1)))
	}
	return w
}

// fanout5 is five independent steps.
func fanout5() *workflow.Workflow {
	w := workflow.New("bench", "fanout5", "1")
	for _, s := range []string{"s1", "s2", "s3", "s4", "s5"} {
		w.Step(s, "noop")
	}
	return w
}

func noop(context.Context, *weft.Attempt) (any, error) { return nil, nil }

// submitMany submits n tasks of workflow, batch to a SubmitMany call.
func submitMany(ctx context.Context, eng *weft.Engine, ref string, n, batch int) error {
	for left := n; left > 0; left -= batch {
		subs := make([]weft.Submission, min(left, batch))
		for i := range subs {
			subs[i].Workflow = ref
		}
		if _, err := eng.SubmitMany(ctx, subs); err != nil {
			return fmt.Errorf("submit: %w", err)
		}
	}
	return nil
}

// statementsPerUnit adds the statements and transactions per unit of work
// between two counts to s (PostgreSQL only: SQLite's estimate is only
// meaningful for the idle scenario).
func statementsPerUnit(ctx context.Context, c queryCounter, s *sample, s0, x0 float64, units int, unit string) error {
	if c.e.backend != "postgres" {
		return nil
	}
	s1, x1, err := c.counts(ctx)
	if err != nil {
		return err
	}
	if s0 >= 0 && s1 >= 0 {
		s.metrics["statements_per_"+unit] = (s1 - s0) / float64(units)
	}
	s.metrics["xacts_per_"+unit] = (x1 - x0) / float64(units)
	return nil
}

func weftSingle(ctx context.Context, e *env, n int, _ options) (sample, error) {
	done := newCountdown(n)
	r, err := openWeft(ctx, e, oneStep(), done.handle)
	if err != nil {
		return sample{}, err
	}
	defer r.close()
	if err := submitMany(ctx, r.engine, "bench/one", n, submitBatch); err != nil {
		return sample{}, err
	}
	s0, x0, err := r.count.counts(ctx, true)
	if err != nil {
		return sample{}, err
	}
	meter, err := startCPUMeter()
	if err != nil {
		return sample{}, err
	}
	start := time.Now()
	if err := r.engine.Start(ctx); err != nil {
		return sample{}, err
	}
	if err := done.wait(ctx); err != nil {
		return sample{}, err
	}
	if err := r.engine.Stop(ctx); err != nil { // records the last outcomes
		return sample{}, err
	}
	elapsed := time.Since(start)
	s := sample{value: float64(n) / elapsed.Seconds(), metrics: map[string]float64{}}
	if err := meter.record(s.metrics, n, "task"); err != nil {
		return sample{}, err
	}
	if err := checkCompleted(ctx, r.engine, n); err != nil {
		return sample{}, err
	}
	if err := statementsPerUnit(ctx, r.count, &s, s0, x0, n, "task"); err != nil {
		return sample{}, err
	}
	s.top, err = r.count.topStatements(ctx, 12)
	return s, err
}

// checkCompleted verifies that the last n tasks completed: a benchmark of
// work that was not done would measure nothing.
func checkCompleted(ctx context.Context, eng *weft.Engine, n int) error {
	seen, before := 0, int64(0)
	for seen < n {
		page, err := eng.List(ctx, weft.TaskFilter{BeforeID: before, Limit: 1000})
		if err != nil {
			return err
		}
		if len(page) == 0 {
			break
		}
		for _, t := range page {
			if t.State != "completed" {
				return fmt.Errorf("task %d is %s, not completed", t.ID, t.State)
			}
		}
		seen += len(page)
		before = page[len(page)-1].ID
	}
	if seen < n {
		return fmt.Errorf("found %d tasks, want %d", seen, n)
	}
	return nil
}

func weftSubmit(ctx context.Context, e *env, n int, _ options) (sample, error) {
	r, err := openWeft(ctx, e, oneStep(), nil)
	if err != nil {
		return sample{}, err
	}
	defer r.close()
	s0, x0, err := r.count.counts(ctx, true)
	if err != nil {
		return sample{}, err
	}
	meter, err := startCPUMeter()
	if err != nil {
		return sample{}, err
	}
	start := time.Now()
	if err := submitMany(ctx, r.engine, "bench/one", n, submitBatch); err != nil {
		return sample{}, err
	}
	s := sample{value: float64(n) / time.Since(start).Seconds(), metrics: map[string]float64{}}
	if err := meter.record(s.metrics, n, "task"); err != nil {
		return sample{}, err
	}
	if err := statementsPerUnit(ctx, r.count, &s, s0, x0, n, "task"); err != nil {
		return sample{}, err
	}
	s.top, err = r.count.topStatements(ctx, 12)
	return s, err
}

func weftDAG7(ctx context.Context, e *env, n int, _ options) (sample, error) {
	r, err := openWeft(ctx, e, dag7(), noop)
	if err != nil {
		return sample{}, err
	}
	defer r.close()
	return latencies(ctx, r, "bench/dag7", n, "dag")
}

func weftChain7(ctx context.Context, e *env, n int, _ options) (sample, error) {
	r, err := openWeft(ctx, e, chain7(), noop)
	if err != nil {
		return sample{}, err
	}
	defer r.close()
	return latencies(ctx, r, "bench/chain7", n, "dag")
}

// weftFunc5 is dag7's measure for a durable function of five sequential
// steps: each step a call, recorded as a step of the task.
func weftFunc5(ctx context.Context, e *env, n int, _ options) (sample, error) {
	r, err := openWeft(ctx, e, nil, nil)
	if err != nil {
		return sample{}, err
	}
	defer r.close()
	err = weft.RegisterFunc(ctx, r.engine, "bench/func5", func(ctx weft.FuncContext, _ struct{}) (int, error) {
		total := 0
		for _, name := range []string{"s1", "s2", "s3", "s4", "s5"} {
			v, err := weft.Step(ctx, name, func(context.Context) (int, error) { return 1, nil })
			if err != nil {
				return 0, err
			}
			total += v
		}
		return total, nil
	})
	if err != nil {
		return sample{}, err
	}
	return latencies(ctx, r, "bench/func5", n, "function")
}

// latencies submits n tasks of ref one at a time on the idle engine and
// times each from submission to completion.
func latencies(ctx context.Context, r *weftRun, ref string, n int, unit string) (sample, error) {
	n = max(n, 200) // percentiles up to p99 need a few hundred runs
	if err := r.engine.Start(ctx); err != nil {
		return sample{}, err
	}
	s0, x0, err := r.count.counts(ctx, true)
	if err != nil {
		return sample{}, err
	}
	meter, err := startCPUMeter()
	if err != nil {
		return sample{}, err
	}
	lat := make([]float64, 0, n)
	for range n {
		start := time.Now()
		res, err := r.engine.Submit(ctx, weft.Submission{Workflow: ref})
		if err != nil {
			return sample{}, err
		}
		task, err := r.engine.Wait(ctx, res.Task.ID)
		if err != nil {
			return sample{}, err
		}
		if task.State != "completed" {
			return sample{}, fmt.Errorf("task %d ended %s", task.ID, task.State)
		}
		lat = append(lat, float64(time.Since(start).Microseconds())/1000)
	}
	slices.Sort(lat)
	s := sample{value: percentile(lat, 0.50), latencies: lat, metrics: map[string]float64{
		"p50_ms": percentile(lat, 0.50), "p95_ms": percentile(lat, 0.95), "p99_ms": percentile(lat, 0.99), "max_ms": lat[len(lat)-1],
	}}
	if err := meter.record(s.metrics, n, unit); err != nil {
		return sample{}, err
	}
	if err := statementsPerUnit(ctx, r.count, &s, s0, x0, n, unit); err != nil {
		return sample{}, err
	}
	s.top, err = r.count.topStatements(ctx, 16)
	return s, err
}

func weftFanout5(ctx context.Context, e *env, n int, _ options) (sample, error) {
	done := newCountdown(5 * n)
	r, err := openWeft(ctx, e, fanout5(), done.handle)
	if err != nil {
		return sample{}, err
	}
	defer r.close()
	s0, x0, err := r.count.counts(ctx, true)
	if err != nil {
		return sample{}, err
	}
	meter, err := startCPUMeter()
	if err != nil {
		return sample{}, err
	}
	start := time.Now()
	if err := r.engine.Start(ctx); err != nil {
		return sample{}, err
	}
	if err := submitMany(ctx, r.engine, "bench/fanout5", n, 100); err != nil {
		return sample{}, err
	}
	if err := done.wait(ctx); err != nil {
		return sample{}, err
	}
	if err := r.engine.Stop(ctx); err != nil {
		return sample{}, err
	}
	elapsed := time.Since(start).Seconds()
	s := sample{value: float64(n) / elapsed, metrics: map[string]float64{"steps_per_s": 5 * float64(n) / elapsed}}
	if err := meter.record(s.metrics, n, "workflow"); err != nil {
		return sample{}, err
	}
	if err := checkCompleted(ctx, r.engine, n); err != nil {
		return sample{}, err
	}
	if err := statementsPerUnit(ctx, r.count, &s, s0, x0, n, "workflow"); err != nil {
		return sample{}, err
	}
	s.top, err = r.count.topStatements(ctx, 12)
	return s, err
}

// depthPoints are the queue depths of the depth scenario, up to max.
func depthPoints(max int) []int {
	var out []int
	for _, d := range []int{1000, 100000, 1000000} {
		if d <= max {
			out = append(out, d)
		}
	}
	if len(out) == 0 || out[len(out)-1] != max {
		out = append(out, max)
	}
	return out
}

// weftDepth fills a queue with one-step tasks through the store's bulk
// insert (the fastest path weft has: one transaction per 5,000 tasks) and
// times ClaimSteps of a fixed batch, as an engine with 100 free slots calls
// it.
func weftDepth(ctx context.Context, e *env, max int, _ options) (sample, error) {
	const batch, insertBatch = 100, 5000
	if max < 1000 {
		return sample{}, fmt.Errorf("depth: -n %d: want a largest depth of at least 1000", max)
	}
	var s sample
	for _, depth := range depthPoints(max) {
		claims := min(30, depth/(2*batch)-1) // never drain more than half the queue
		r, err := openWeft(ctx, e, oneStep(), nil)
		if err != nil {
			return sample{}, err
		}
		p, err := func() (depthPoint, error) {
			defer r.close()
			start := time.Now()
			ins := make([]store.TaskInsert, 0, insertBatch)
			for left := depth; left > 0; left -= insertBatch {
				ins = ins[:0]
				for range min(left, insertBatch) {
					ins = append(ins, store.TaskInsert{Namespace: "bench", Workflow: "one", Version: "1",
						Steps: []store.StepInsert{{Name: "s", Handler: "noop", MaxAttempts: 1}}})
				}
				if _, err := r.store.InsertTasks(ctx, ins); err != nil {
					return depthPoint{}, fmt.Errorf("insert backlog: %w", err)
				}
			}
			p := depthPoint{Depth: depth, InsertS: time.Since(start).Seconds(), Claims: claims, Batch: batch}
			// One claim first, untimed: it prepares the statements and
			// warms the cache, as an engine's first claim does.
			if _, err := r.store.ClaimSteps(ctx, store.ClaimParams{EngineID: "bench-depth", Limit: batch, LeaseID: 1000}); err != nil {
				return depthPoint{}, fmt.Errorf("claim: %w", err)
			}
			// The plan of the claim's query at this depth, as it ran.
			if x, ok := r.store.(interface {
				ExplainClaimRun(context.Context, store.ClaimParams) (string, error)
			}); ok {
				plan, err := x.ExplainClaimRun(ctx, store.ClaimParams{EngineID: "bench-depth", Limit: batch})
				if err != nil {
					return depthPoint{}, err
				}
				fmt.Fprintf(os.Stderr, "bench: depth %d: claim plan:\n%s", depth, plan)
			}
			times := make([]float64, 0, claims)
			for i := range claims {
				t0 := time.Now()
				got, err := r.store.ClaimSteps(ctx, store.ClaimParams{EngineID: "bench-depth", Limit: batch, LeaseID: int64(i + 1)})
				if err != nil {
					return depthPoint{}, fmt.Errorf("claim: %w", err)
				}
				times = append(times, float64(time.Since(t0).Microseconds())/1000)
				if len(got) != batch {
					return depthPoint{}, fmt.Errorf("claim %d got %d steps, want %d", i, len(got), batch)
				}
			}
			p.ClaimMS = median(times)
			return p, nil
		}()
		if err != nil {
			return sample{}, err
		}
		fmt.Fprintf(os.Stderr, "bench: depth %d: %.3f ms per claim (backlog inserted in %.1fs)\n", p.Depth, p.ClaimMS, p.InsertS)
		s.depth = append(s.depth, p)
	}
	s.value = s.depth[len(s.depth)-1].ClaimMS
	s.metrics = map[string]float64{}
	if len(s.depth) > 1 {
		s.metrics["largest/smallest"] = s.depth[len(s.depth)-1].ClaimMS / s.depth[0].ClaimMS
	}
	return s, nil
}

// idleFor observes this process for d: CPU seconds from getrusage (the
// whole process, in which only the engine under test runs) and statements
// from c.
func idleFor(ctx context.Context, c queryCounter, d time.Duration) (sample, error) {
	// Let start-up work (registration, first claims, the first maintenance
	// pass) finish before observing.
	select {
	case <-time.After(2 * time.Second):
	case <-ctx.Done():
		return sample{}, ctx.Err()
	}
	s0, x0, err := c.counts(ctx, true)
	if err != nil {
		return sample{}, err
	}
	cpu0, err := processCPU()
	if err != nil {
		return sample{}, err
	}
	start := time.Now()
	select {
	case <-time.After(d):
	case <-ctx.Done():
		return sample{}, ctx.Err()
	}
	cpu1, err := processCPU()
	if err != nil {
		return sample{}, err
	}
	elapsed := time.Since(start).Seconds()
	s1, x1, err := c.counts(ctx)
	if err != nil {
		return sample{}, err
	}
	cpu := (cpu1 - cpu0).Seconds()
	s := sample{value: cpu, metrics: map[string]float64{
		"cpu_share_pct": 100 * cpu / elapsed,
	}}
	if s0 >= 0 {
		s.metrics["statements_per_s"] = (s1 - s0) / elapsed
	}
	if c.e.backend == "postgres" {
		s.metrics["xacts_per_s"] = (x1 - x0) / elapsed
	} else {
		s.metrics["cgo_calls_per_s"] = (s1 - s0) * c.e.cgoPerSt / elapsed
	}
	s.top, err = c.topStatements(ctx, 8)
	return s, err
}

func processCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, fmt.Errorf("getrusage: %w", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

func weftIdle(ctx context.Context, e *env, _ int, o options) (sample, error) {
	r, err := openWeft(ctx, e, oneStep(), noop)
	if err != nil {
		return sample{}, err
	}
	defer r.close()
	if err := r.engine.Start(ctx); err != nil {
		return sample{}, err
	}
	s, err := idleFor(ctx, r.count, o.idle)
	return s, errors.Join(err, r.engine.Stop(ctx))
}
