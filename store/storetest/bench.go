package storetest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// BenchmarkAttentionBacklog times the attention list (ListTasks with
// Attention) in its worst case: 100,000 tasks whose one step has waited
// for two hours with no engine or worker serving its handler, so that
// every ready step needs attention. s must read the time from clock.
func BenchmarkAttentionBacklog(b *testing.B, s store.Store, clock *Clock) {
	ctx := context.Background()
	const tasks, batch = 100_000, 1_000
	for i := 0; i < tasks; i += batch {
		in := make([]store.TaskInsert, batch)
		for j := range in {
			in[j] = store.TaskInsert{Namespace: "ns", Workflow: "wf", Version: "1", Input: []byte(`{}`), Steps: chain("only")}
		}
		_, err := s.InsertTasks(ctx, in)
		require.NoError(b, err)
	}
	clock.Advance(2 * time.Hour)
	b.ResetTimer()
	for b.Loop() {
		page, err := s.ListTasks(ctx, store.TaskFilter{Attention: true, Limit: 50})
		require.NoError(b, err)
		require.Len(b, page, 50)
	}
}

// BenchmarkGetTask times GetTask of a task of seven steps (what Wait and
// GET /v1/tasks/{id} read): its row, its steps and its children, in one
// round trip where the store takes reads together.
func BenchmarkGetTask(b *testing.B, s store.Store) {
	ctx := context.Background()
	res, err := s.InsertTasks(ctx, []store.TaskInsert{{Namespace: "ns", Workflow: "wf", Version: "1", Input: []byte(`{}`),
		Steps: chain("a", "b", "c", "d", "e", "f", "g")}})
	require.NoError(b, err)
	id := res[0].Task.ID
	for b.Loop() {
		task, err := s.GetTask(ctx, id)
		require.NoError(b, err)
		require.Len(b, task.Steps, 7)
	}
}

// claimBench is how many steps BenchmarkClaimSteps claims an operation:
// the bench module's engines have 100 slots.
const claimBench = 100

// BenchmarkClaimSteps times a claim of claimBench one-step tasks' steps
// from a queue of thousands: what the claim loop of a busy engine does (an
// operation is one claim; ns/step is the same per step). The steps claimed
// are completed and the queue refilled off the clock, so that, as in an
// engine, only the last claim's steps run. Each sub-benchmark opens its
// own store (open) and claims under policies configured so that none
// binds, as the bench module's policies scenario sets them (the design
// allows them 10% over none): "none";
// "limits", a namespace limit, a workflow limit and a step limit keyed by
// one of 100 values, each 1,000,000; "rates", a namespace rate and a step
// rate keyed the same way, each 1,000,000 a second; "weights", the
// namespace at weight 3 and another, with no ready work, at 2; "breaker",
// a circuit breaker on the step; "all", all of these and another
// namespace paused.
func BenchmarkClaimSteps(b *testing.B, open func(testing.TB) store.Store) {
	const high = 1_000_000
	rate, limit := store.Rate{Limit: high, Per: time.Second}, high
	three, two, paused := 3, 2, true
	type variant struct {
		set  []store.PolicyChange
		task func(in *store.TaskInsert, i int)
	}
	limits := variant{
		set: []store.PolicyChange{{Target: "ns", Concurrency: &limit}},
		task: func(in *store.TaskInsert, i int) {
			in.LimitKey, in.Limit = "workflow:ns/wf", limit
			in.Steps[0].LimitKey, in.Steps[0].Limit = fmt.Sprintf("step:ns/wf/only=%d", i%100), limit
		},
	}
	rates := variant{
		set: []store.PolicyChange{{Target: "ns", Rate: &rate}},
		task: func(in *store.TaskInsert, i int) {
			in.Steps[0].RateKey, in.Steps[0].Rate = fmt.Sprintf("step:ns/wf/only=%d", i%100), rate
		},
	}
	weights := variant{set: []store.PolicyChange{{Target: "ns", Weight: &three}, {Target: "elsewhere", Weight: &two}}}
	breaker := variant{task: func(in *store.TaskInsert, _ int) {
		in.Steps[0].Breaker = &store.BreakerSpec{Key: "step:ns/wf/only", Failures: high, Cooldown: time.Minute}
	}}
	all := variant{
		set: slices.Concat(limits.set, rates.set, weights.set, []store.PolicyChange{{Target: "other", Paused: &paused}}),
		task: func(in *store.TaskInsert, i int) {
			for _, v := range []variant{limits, rates, breaker} {
				v.task(in, i)
			}
		},
	}
	for _, bc := range []struct {
		name string
		variant
	}{{"none", variant{}}, {"limits", limits}, {"rates", rates}, {"weights", weights}, {"breaker", breaker}, {"all", all}} {
		b.Run(bc.name, func(b *testing.B) {
			s := open(b)
			for _, c := range bc.set {
				c.Actor = "bench"
				_, err := s.SetPolicy(context.Background(), c)
				require.NoError(b, err)
			}
			benchmarkClaims(b, s, bc.task)
		})
	}
}

// benchmarkClaims times claims of claimBench steps of one-step tasks,
// each set up by task where it is not nil.
func benchmarkClaims(b *testing.B, s store.Store, task func(in *store.TaskInsert, i int)) {
	ctx := context.Background()
	const refill = 10_000
	queued := 0
	fill := func() {
		in := make([]store.TaskInsert, refill)
		for i := range in {
			in[i] = store.TaskInsert{Namespace: "ns", Workflow: "wf", Version: "1", Input: []byte(`{}`), Steps: chain("only")}
			if task != nil {
				task(&in[i], i)
			}
		}
		_, err := s.InsertTasks(ctx, in)
		require.NoError(b, err)
		queued += refill
	}
	p := store.ClaimParams{EngineID: "e1", Limit: claimBench, Handlers: []string{"h"}}
	claimed := 0
	for b.Loop() {
		if queued < claimBench {
			b.StopTimer()
			fill()
			b.StartTimer()
		}
		got, err := s.ClaimSteps(ctx, p)
		require.NoError(b, err)
		require.Len(b, got, claimBench)
		queued -= len(got)
		claimed += len(got)
		// Completed off the clock, as an engine's slots are, so that no
		// more than one claim's steps run at a time.
		b.StopTimer()
		outcomes := make([]store.Outcome, len(got))
		for i, c := range got {
			outcomes[i] = store.Outcome{Fence: c.Fence, EngineID: p.EngineID, State: state.StepCompleted}
		}
		res, err := s.CompleteSteps(ctx, outcomes)
		require.NoError(b, err)
		for _, err := range res {
			require.NoError(b, err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(claimed), "ns/step")
}
