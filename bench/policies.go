package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/workflow"
)

// The policies scenario: the one-step burn-down of the single scenario, run
// alternately with no policy and with every concurrency policy and rate
// configured but set too high to bind (a namespace limit and rate, a keyed
// step limit and rate and a workflow limit, and another namespace paused),
// so that the cost of the policies on the claim path is the difference of
// two medians of one run.

// policyHigh is a limit no run comes near.
const policyHigh = 1_000_000

// policyWorkflow is the one-step workflow, with limits when limited.
func policyWorkflow(limited bool) *workflow.Workflow {
	w := workflow.New("bench", "one", "1")
	if !limited {
		return w.Step("s", "noop")
	}
	return w.WithConcurrency(policyHigh, "").Step("s", "noop", workflow.WithConcurrency(policyHigh, "input.c"),
		workflow.WithRateLimit(policyHigh, time.Second, "input.c"))
}

// policyRun burns down n tasks with or without the policies and returns
// the throughput.
func policyRun(ctx context.Context, e *env, n int, limited bool) (float64, error) {
	done := newCountdown(n)
	r, err := openWeft(ctx, e, policyWorkflow(limited), done.handle)
	if err != nil {
		return 0, err
	}
	defer r.close()
	if limited {
		op := weft.Operator{Actor: "bench"}
		high := policyHigh
		rate := weft.Rate{Limit: policyHigh, Per: time.Second}
		if _, err := r.engine.SetLimits(ctx, "bench", weft.Limits{Concurrency: &high, Rate: &rate}, op); err != nil {
			return 0, err
		}
		if _, err := r.engine.Pause(ctx, "elsewhere", op); err != nil {
			return 0, err
		}
	}
	for left := n; left > 0; left -= submitBatch {
		subs := make([]weft.Submission, min(left, submitBatch))
		for i := range subs {
			subs[i] = weft.Submission{Workflow: "bench/one", Input: map[string]int{"c": (left + i) % 100}}
		}
		if _, err := r.engine.SubmitMany(ctx, subs); err != nil {
			return 0, fmt.Errorf("submit: %w", err)
		}
	}
	start := time.Now()
	if err := r.engine.Start(ctx); err != nil {
		return 0, err
	}
	if err := done.wait(ctx); err != nil {
		return 0, err
	}
	if err := r.engine.Stop(ctx); err != nil {
		return 0, err
	}
	elapsed := time.Since(start)
	if err := checkCompleted(ctx, r.engine, n); err != nil {
		return 0, err
	}
	return float64(n) / elapsed.Seconds(), nil
}

// weftPolicies alternates runs without and with policies (o.runs pairs)
// and reports the median throughput of each and their ratio.
func weftPolicies(ctx context.Context, e *env, n int, o options) (sample, error) {
	var none, limited []float64
	for run := 1; run <= max(o.runs, 1); run++ {
		for _, lim := range []bool{false, true} {
			fmt.Fprintf(os.Stderr, "bench: policies limited=%v run %d/%d\n", lim, run, o.runs)
			v, err := policyRun(ctx, e, n, lim)
			if err != nil {
				return sample{}, err
			}
			if lim {
				limited = append(limited, v)
			} else {
				none = append(none, v)
			}
		}
	}
	nm, lm := median(none), median(limited)
	return sample{value: lm, metrics: map[string]float64{
		"none_tasks_per_s":    nm,
		"limited_tasks_per_s": lm,
		"limited/none":        lm / nm,
	}}, nil
}
