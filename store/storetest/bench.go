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
