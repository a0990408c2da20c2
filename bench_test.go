package weft_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/workflow"
)

// eachBackendBench runs fn as a sub-benchmark on every backend.
func eachBackendBench(b *testing.B, fn func(b *testing.B, open storeFactory)) {
	for _, name := range []string{"sqlite", "postgres"} {
		b.Run(name, func(b *testing.B) { fn(b, backends()[name]) })
	}
}

func benchEngine(b *testing.B, open storeFactory, c weft.Config) *weft.Engine {
	b.Helper()
	s := open(b)
	c.Logger = quietLogger()
	e, err := weft.New(s, c)
	if err != nil {
		b.Fatal(err)
	}
	return e
}

func noop(context.Context, *weft.Attempt) (any, error) { return nil, nil }

// BenchmarkOneStepThroughput burns down b.N pre-inserted one-step no-op
// tasks and reports tasks per second from start to the last recorded
// outcome.
func BenchmarkOneStepThroughput(b *testing.B) {
	eachBackendBench(b, func(b *testing.B, open storeFactory) {
		burnDown(context.Background(), b, open, weft.Config{Concurrency: 64})
	})
}

// burnDown submits b.N one-step no-op tasks with ctx, then runs them on an
// engine with config c and reports tasks per second from its start to the
// last recorded outcome.
func burnDown(ctx context.Context, b *testing.B, open storeFactory, c weft.Config) {
	e := benchEngine(b, open, c)
	var done atomic.Int64
	all := make(chan struct{})
	n := int64(b.N)
	e.Handle("noop", func(context.Context, *weft.Attempt) (any, error) {
		if done.Add(1) == n {
			close(all)
		}
		return nil, nil
	})
	if err := e.Register(ctx, workflow.New("bench", "one", "1").Step("s", "noop")); err != nil {
		b.Fatal(err)
	}
	for left := b.N; left > 0; left -= 1000 {
		subs := make([]weft.Submission, min(left, 1000))
		for i := range subs {
			subs[i].Workflow = "bench/one"
		}
		if _, err := e.SubmitMany(ctx, subs); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	start := time.Now()
	if err := e.Start(ctx); err != nil {
		b.Fatal(err)
	}
	<-all
	if err := e.Stop(ctx); err != nil { // flushes the last outcomes
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "tasks/s")
}

// BenchmarkSubmitBulk submits one-step tasks 1000 to a transaction.
func BenchmarkSubmitBulk(b *testing.B) {
	eachBackendBench(b, func(b *testing.B, open storeFactory) {
		ctx := context.Background()
		e := benchEngine(b, open, weft.Config{})
		if err := e.Register(ctx, workflow.New("bench", "one", "1").Step("s", "noop")); err != nil {
			b.Fatal(err)
		}
		subs := make([]weft.Submission, 1000)
		for i := range subs {
			subs[i] = weft.Submission{Workflow: "bench/one", Input: map[string]int{"i": i}}
		}
		b.ResetTimer()
		start := time.Now()
		for range b.N {
			if _, err := e.SubmitMany(ctx, subs); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N*len(subs))/time.Since(start).Seconds(), "tasks/s")
	})
}

// dag7 is a fan-out of three, a join, a chain of two and a final step.
func dag7() *workflow.Workflow {
	return workflow.New("bench", "dag7", "1").
		Step("a", "noop").Step("b", "noop").Step("c", "noop").
		Step("join", "noop", workflow.DependsOn("a", "b", "c")).
		Step("d", "noop", workflow.DependsOn("join")).
		Step("e", "noop", workflow.DependsOn("d")).
		Step("final", "noop", workflow.DependsOn("e"))
}

// BenchmarkDAG7Latency submits one 7-step DAG at a time to an idle engine
// and measures submission to task completion.
func BenchmarkDAG7Latency(b *testing.B) {
	eachBackendBench(b, func(b *testing.B, open storeFactory) {
		ctx := context.Background()
		e := benchEngine(b, open, weft.Config{Concurrency: 8})
		e.Handle("noop", noop)
		if err := e.Register(ctx, dag7()); err != nil {
			b.Fatal(err)
		}
		if err := e.Start(ctx); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { e.Stop(ctx) })
		lat := make([]time.Duration, 0, b.N)
		b.ResetTimer()
		for range b.N {
			start := time.Now()
			res, err := e.Submit(ctx, weft.Submission{Workflow: "bench/dag7"})
			if err != nil {
				b.Fatal(err)
			}
			task, err := e.Wait(ctx, res.Task.ID)
			if err != nil || task.State != "completed" {
				b.Fatalf("task %d: %v %v", res.Task.ID, task.State, err)
			}
			lat = append(lat, time.Since(start))
		}
		b.StopTimer()
		slices.Sort(lat)
		pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
		b.ReportMetric(pct(0.50), "p50-ms")
		b.ReportMetric(pct(0.95), "p95-ms")
		b.ReportMetric(pct(0.99), "p99-ms")
	})
}
