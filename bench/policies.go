package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/workflow"
)

// The policies scenario: the one-step burn-down of the single scenario, run
// alternately with no policy and with each kind of scheduling policy
// configured but set so that it does not bind, then with all of them at
// once, so that the cost of each on the claim path is the ratio of two
// medians of one run:
//
//   - pause: another namespace paused;
//   - limits: a namespace limit, a workflow limit and a step limit keyed by
//     input.c (100 keys), all of 1,000,000;
//   - rates: a namespace rate and a step rate keyed by input.c, of
//     1,000,000 a second;
//   - weights: the namespace at weight 3 and another at 2 (the other has no
//     ready work, so the claim's slots all go to this one);
//   - breaker: a circuit breaker on the step (no step fails);
//   - all: everything above.

// policyHigh is a limit no run comes near.
const policyHigh = 1_000_000

// policyVariant is one configuration of the scenario.
type policyVariant struct {
	name    string
	options []workflow.StepOption                                             // on the step
	flow    func(*workflow.Workflow) *workflow.Workflow                       // on the workflow
	set     func(ctx context.Context, e *weft.Engine, op weft.Operator) error // at run time
}

var policyVariants = func() []policyVariant {
	high := policyHigh
	rate := weft.Rate{Limit: policyHigh, Per: time.Second}
	three, two := 3, 2
	pause := func(ctx context.Context, e *weft.Engine, op weft.Operator) error {
		_, err := e.Pause(ctx, "elsewhere", op)
		return err
	}
	limits := func(ctx context.Context, e *weft.Engine, op weft.Operator) error {
		_, err := e.SetLimits(ctx, "bench", weft.Limits{Concurrency: &high}, op)
		return err
	}
	rates := func(ctx context.Context, e *weft.Engine, op weft.Operator) error {
		_, err := e.SetLimits(ctx, "bench", weft.Limits{Rate: &rate}, op)
		return err
	}
	weights := func(ctx context.Context, e *weft.Engine, op weft.Operator) error {
		if _, err := e.SetLimits(ctx, "bench", weft.Limits{Weight: &three}, op); err != nil {
			return err
		}
		_, err := e.SetLimits(ctx, "elsewhere", weft.Limits{Weight: &two}, op)
		return err
	}
	flowLimit := func(w *workflow.Workflow) *workflow.Workflow { return w.WithConcurrency(policyHigh, "") }
	stepLimit := workflow.WithConcurrency(policyHigh, "input.c")
	stepRate := workflow.WithRateLimit(policyHigh, time.Second, "input.c")
	breaker := workflow.WithCircuitBreaker(policyHigh, time.Minute)
	all := func(ctx context.Context, e *weft.Engine, op weft.Operator) error {
		for _, f := range []func(context.Context, *weft.Engine, weft.Operator) error{pause, limits, rates, weights} {
			if err := f(ctx, e, op); err != nil {
				return err
			}
		}
		return nil
	}
	return []policyVariant{
		{name: "none"},
		{name: "pause", set: pause},
		{name: "limits", options: []workflow.StepOption{stepLimit}, flow: flowLimit, set: limits},
		{name: "rates", options: []workflow.StepOption{stepRate}, set: rates},
		{name: "weights", set: weights},
		{name: "breaker", options: []workflow.StepOption{breaker}},
		{name: "all", options: []workflow.StepOption{stepLimit, stepRate, breaker}, flow: flowLimit, set: all},
	}
}()

// policyRun burns down n tasks under variant v and returns the throughput,
// the machine's CPU time per task (microseconds, every process's) and the
// burn-down's statements per task (on PostgreSQL with pg_stat_statements;
// else -1).
func policyRun(ctx context.Context, e *env, n int, v policyVariant) (tps, cpu, stmts float64, err error) {
	done := newCountdown(n)
	w := workflow.New("bench", "one", "1")
	if v.flow != nil {
		w = v.flow(w)
	}
	r, err := openWeft(ctx, e, w.Step("s", "noop", v.options...), done.handle)
	if err != nil {
		return 0, 0, 0, err
	}
	defer r.close()
	if v.set != nil {
		// The policies name a second namespace, with no ready work: it
		// exists once a workflow is registered in it.
		if err := r.engine.Register(ctx, workflow.New("elsewhere", "idle", "1").Step("s", "noop")); err != nil {
			return 0, 0, 0, err
		}
		if err := v.set(ctx, r.engine, weft.Operator{Actor: "bench"}); err != nil {
			return 0, 0, 0, err
		}
	}
	for left := n; left > 0; left -= submitBatch {
		subs := make([]weft.Submission, min(left, submitBatch))
		for i := range subs {
			subs[i] = weft.Submission{Workflow: "bench/one", Input: map[string]int{"c": (left + i) % 100}}
		}
		if _, err := r.engine.SubmitMany(ctx, subs); err != nil {
			return 0, 0, 0, fmt.Errorf("submit: %w", err)
		}
	}
	s0, _, err := r.count.counts(ctx, true)
	if err != nil {
		return 0, 0, 0, err
	}
	meter, err := startCPUMeter()
	if err != nil {
		return 0, 0, 0, err
	}
	start := time.Now()
	if err := r.engine.Start(ctx); err != nil {
		return 0, 0, 0, err
	}
	if err := done.wait(ctx); err != nil {
		return 0, 0, 0, err
	}
	if err := r.engine.Stop(ctx); err != nil {
		return 0, 0, 0, err
	}
	elapsed := time.Since(start)
	used := map[string]float64{}
	if err := meter.record(used, n, "task"); err != nil {
		return 0, 0, 0, err
	}
	cpu = used["machine_cpu_us_per_task"]
	if err := checkCompleted(ctx, r.engine, n); err != nil {
		return 0, 0, 0, err
	}
	stmts = -1
	if s0 >= 0 && e.backend == "postgres" {
		s1, _, err := r.count.counts(ctx)
		if err != nil {
			return 0, 0, 0, err
		}
		stmts = (s1 - s0) / float64(n)
		if os.Getenv("WEFT_BENCH_TOP") != "" {
			// What the statements were, for finding where a policy's
			// cost goes.
			top, err := r.count.topStatements(ctx, 15)
			if err != nil {
				return 0, 0, 0, err
			}
			for _, t := range top {
				fmt.Fprintf(os.Stderr, "bench: policies %s: %8d calls %9.1f ms  %.150s\n", v.name, t.Calls, t.TotalMS, t.Query)
			}
		}
	}
	return float64(n) / elapsed.Seconds(), cpu, stmts, nil
}

// weftPolicies runs every variant in turn, o.runs times, and reports the
// median throughput of each and its ratio to the median without policies;
// the scenario's value is the throughput of the last variant run ("all"
// unless -policies chose others).
func weftPolicies(ctx context.Context, e *env, n int, o options) (sample, error) {
	variants := policyVariants
	if o.policies != "" {
		variants = nil
		for _, name := range strings.Split(o.policies, ",") {
			i := slices.IndexFunc(policyVariants, func(v policyVariant) bool { return v.name == name })
			if i < 0 {
				return sample{}, fmt.Errorf("-policies: unknown variant %q", name)
			}
			variants = append(variants, policyVariants[i])
		}
		if variants[0].name != "none" {
			variants = append([]policyVariant{policyVariants[0]}, variants...)
		}
	}
	got, cpus, stmts := map[string][]float64{}, map[string][]float64{}, map[string][]float64{}
	for run := 1; run <= max(o.runs, 1); run++ {
		for _, v := range variants {
			tps, cpu, perTask, err := policyRun(ctx, e, n, v)
			if err != nil {
				return sample{}, fmt.Errorf("policies %s: %w", v.name, err)
			}
			// Each run's figure, for the spread the medians hide.
			fmt.Fprintf(os.Stderr, "bench: policies %s run %d/%d: %.0f tasks/s, %.1f us of the machine's CPU a task, %.4f statements/task\n",
				v.name, run, o.runs, tps, cpu, perTask)
			got[v.name] = append(got[v.name], tps)
			cpus[v.name] = append(cpus[v.name], cpu)
			if perTask >= 0 {
				stmts[v.name] = append(stmts[v.name], perTask)
			}
		}
	}
	none, noneCPU := median(got["none"]), median(cpus["none"])
	metrics := map[string]float64{}
	for _, v := range variants {
		m, c := median(got[v.name]), median(cpus[v.name])
		metrics[v.name+"_tasks_per_s"] = m
		metrics[v.name+"_cpu_us_per_task"] = c
		if len(stmts[v.name]) > 0 {
			metrics[v.name+"_statements_per_task"] = median(stmts[v.name])
		}
		if v.name != "none" {
			metrics[v.name+"/none"] = m / none
			// What the policy costs in work: the machine's CPU a task,
			// against the run without (above 1: it costs more).
			metrics[v.name+"/none_cpu"] = c / noneCPU
		}
	}
	return sample{value: median(got[variants[len(variants)-1].name]), metrics: metrics, variants: got}, nil
}
