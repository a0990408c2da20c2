package storetest

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// BenchmarkSubmit times InsertTasks of one-step tasks: "one", a task per
// call (what a REST submission does); "keyed", the same with an
// idempotency key each; "batch", claimBench tasks per call. An operation
// is one call; ns/task is the same per task. Each sub-benchmark opens its
// own store (open).
func BenchmarkSubmit(b *testing.B, open func(testing.TB) store.Store) {
	for _, bc := range []struct {
		name  string
		n     int
		keyed bool
	}{{"one", 1, false}, {"keyed", 1, true}, {"batch", claimBench, false}} {
		b.Run(bc.name, func(b *testing.B) {
			s := open(b)
			ctx := context.Background()
			in := make([]store.TaskInsert, bc.n)
			tasks := 0
			for b.Loop() {
				for j := range in {
					in[j] = store.TaskInsert{Namespace: "ns", Workflow: "wf", Version: "1", Input: []byte(`{}`), Steps: chain("only")}
					if bc.keyed {
						in[j].IdempotencyKey = strconv.Itoa(tasks)
					}
					tasks++
				}
				_, err := s.InsertTasks(ctx, in)
				require.NoError(b, err)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(tasks), "ns/task")
		})
	}
}

// BenchmarkComplete times CompleteSteps of claimBench claimed steps, each
// completed: "none", steps without a breaker; "breaker", steps under a
// closed breaker; "breaker failing", the same with one of each call's
// steps failed, the last, so that the breaker always has a failure counted
// when the next claim runs (a claim then takes its steps on the checked
// path, see the breakers of internal/sqlstore). The claims and the
// refills of the queue are off the clock. An operation is one call;
// ns/step is the same per step.
func BenchmarkComplete(b *testing.B, open func(testing.TB) store.Store) {
	for _, bc := range breakerVariants {
		b.Run(bc.name, func(b *testing.B) {
			s := open(b)
			q := newBenchQueue(b, s, bc.breaker, bc.failing)
			for b.Loop() {
				b.StopTimer()
				got := q.claim()
				b.StartTimer()
				q.complete(got)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(q.claimed), "ns/step")
		})
	}
}

// BenchmarkClaimBreakers times ClaimSteps as BenchmarkClaimSteps does,
// under the breaker variants of BenchmarkComplete: the completions and
// refills are off the clock.
func BenchmarkClaimBreakers(b *testing.B, open func(testing.TB) store.Store) {
	for _, bc := range breakerVariants {
		b.Run(bc.name, func(b *testing.B) {
			s := open(b)
			q := newBenchQueue(b, s, bc.breaker, bc.failing)
			for b.Loop() {
				got := q.claim()
				b.StopTimer()
				q.complete(got)
				b.StartTimer()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(q.claimed), "ns/step")
		})
	}
}

var breakerVariants = []struct {
	name             string
	breaker, failing bool
}{{"none", false, false}, {"breaker", true, false}, {"breaker failing", true, true}}

// benchQueue is a queue of one-step tasks refilled as it drains.
type benchQueue struct {
	b                *testing.B
	s                store.Store
	breaker, failing bool
	queued           int
	claimed          int
}

const benchBreaker = "step:ns/wf/only"

func newBenchQueue(b *testing.B, s store.Store, breaker, failing bool) *benchQueue {
	q := &benchQueue{b: b, s: s, breaker: breaker, failing: failing}
	if failing {
		// One failure counted under the breaker, far below its threshold.
		q.fill(1)
		got := q.claimN(1)
		res, err := s.CompleteSteps(context.Background(), []store.Outcome{{Fence: got[0].Fence, EngineID: "e1", State: state.StepFailed, Error: "boom"}})
		require.NoError(b, err)
		require.NoError(b, res[0])
		bs, err := s.ListBreakers(context.Background())
		require.NoError(b, err)
		require.Len(b, bs, 1)
		require.Equal(b, 1, bs[0].Failures)
	}
	return q
}

func (q *benchQueue) fill(n int) {
	in := make([]store.TaskInsert, n)
	for i := range in {
		in[i] = store.TaskInsert{Namespace: "ns", Workflow: "wf", Version: "1", Input: []byte(`{}`), Steps: chain("only")}
		if q.breaker {
			in[i].Steps[0].Breaker = &store.BreakerSpec{Key: benchBreaker, Failures: 1_000_000, Cooldown: time.Minute}
		}
	}
	_, err := q.s.InsertTasks(context.Background(), in)
	require.NoError(q.b, err)
	q.queued += n
}

func (q *benchQueue) claimN(n int) []store.ClaimedStep {
	got, err := q.s.ClaimSteps(context.Background(), store.ClaimParams{EngineID: "e1", Limit: n, Handlers: []string{"h"}})
	require.NoError(q.b, err)
	require.Len(q.b, got, n)
	q.queued -= len(got)
	return got
}

// claim claims claimBench steps, refilling the queue off the clock.
func (q *benchQueue) claim() []store.ClaimedStep {
	if q.queued < claimBench {
		q.b.StopTimer()
		q.fill(10_000)
		q.b.StartTimer()
	}
	got := q.claimN(claimBench)
	q.claimed += len(got)
	return got
}

func (q *benchQueue) complete(got []store.ClaimedStep) {
	outcomes := make([]store.Outcome, len(got))
	for i, c := range got {
		outcomes[i] = store.Outcome{Fence: c.Fence, EngineID: "e1", State: state.StepCompleted}
	}
	if q.failing {
		// The newest step fails: counted after the others' successes.
		last := 0
		for i, c := range got {
			if c.ID > got[last].ID {
				last = i
			}
		}
		outcomes[last].State, outcomes[last].Error = state.StepFailed, "boom"
	}
	res, err := q.s.CompleteSteps(context.Background(), outcomes)
	require.NoError(q.b, err)
	for _, err := range res {
		require.NoError(q.b, err)
	}
}
