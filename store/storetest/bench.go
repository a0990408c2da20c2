package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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
// from a queue of thousands, with no policy set: what the claim loop of a
// busy engine does (an operation is one claim; ns/step is the same per
// step). The steps claimed are left running; the queue is refilled, off
// the clock, when it runs low.
func BenchmarkClaimSteps(b *testing.B, s store.Store) {
	ctx := context.Background()
	const refill = 10_000
	queued := 0
	fill := func() {
		in := make([]store.TaskInsert, refill)
		for i := range in {
			in[i] = store.TaskInsert{Namespace: "ns", Workflow: "wf", Version: "1", Input: []byte(`{}`), Steps: chain("only")}
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
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(claimed), "ns/step")
}
