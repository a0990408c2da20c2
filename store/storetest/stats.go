package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

var statsTests = []struct {
	name string
	fn   func(*testing.T, *harness)
}{
	{"CountTasksByStateIsBounded", testCountTasksByState},
	{"TaskActivityByNamespaceAndBucket", testTaskActivity},
	{"ListTasksByKey", testListTasksByKey},
}

// finishFour inserts three tasks in namespace a and one in b, starts them
// all a second after they were submitted, and then completes a's first,
// fails a's second and completes b's: one task of a stays running.
func (h *harness) finishFour() {
	h.t.Helper()
	h.register("e1")
	h.insert(store.TaskInsert{Namespace: "a"}, store.TaskInsert{Namespace: "a"}, store.TaskInsert{Namespace: "a"}, store.TaskInsert{Namespace: "b"})
	h.clock.Advance(time.Second)
	claimed := h.claim("e1", 4)
	require.Len(h.t, claimed, 4)
	h.clock.Advance(2 * time.Second)
	byTask := map[int64]store.ClaimedStep{}
	var ids []int64
	for _, c := range claimed {
		byTask[c.TaskID] = c
		ids = append(ids, c.TaskID)
	}
	first, second, fourth := byTask[minID(ids, 0)], byTask[minID(ids, 1)], byTask[minID(ids, 3)]
	h.outcome(first, state.StepCompleted)
	h.outcome(second, state.StepFailed)
	h.outcome(fourth, state.StepCompleted)
}

// minID returns the n-th smallest id.
func minID(ids []int64, n int) int64 {
	sorted := append([]int64(nil), ids...)
	for i := range sorted {
		for j := i + 1; j < len(sorted); j++ {
			if sorted[j] < sorted[i] {
				sorted[i], sorted[j] = sorted[j], sorted[i]
			}
		}
	}
	return sorted[n]
}

func testCountTasksByState(t *testing.T, h *harness) {
	h.finishFour()
	counts, err := h.s.CountTasksByState(h.ctx, 10, nil)
	require.NoError(t, err)
	got := map[state.Task]int{}
	for _, c := range counts {
		got[c.State] = c.Count
	}
	require.Equal(t, map[state.Task]int{state.TaskPending: 0, state.TaskRunning: 1, state.TaskCompleted: 2, state.TaskFailed: 1,
		state.TaskCancelled: 0, state.TaskExpired: 0}, got)
	capped, err := h.s.CountTasksByState(h.ctx, 1, nil)
	require.NoError(t, err)
	for _, c := range capped {
		require.LessOrEqual(t, c.Count, 1, "state %s counted past the limit", c.State)
	}
	held, err := h.s.CountHeld(h.ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]int{"e1": 1}, held, "the running task's step is held by e1")
	_, err = h.s.CountTasksByState(h.ctx, 0, nil)
	require.ErrorIs(t, err, store.ErrInvalid)

	// Bound to namespaces, the counts are theirs alone.
	for _, tt := range []struct {
		namespaces []string
		want       map[state.Task]int
	}{
		{[]string{"b"}, map[state.Task]int{state.TaskCompleted: 1}},
		{[]string{"a", "b"}, map[state.Task]int{state.TaskRunning: 1, state.TaskCompleted: 2, state.TaskFailed: 1}},
		{[]string{}, map[state.Task]int{}},
	} {
		counts, err := h.s.CountTasksByState(h.ctx, 10, tt.namespaces)
		require.NoError(t, err)
		got := map[state.Task]int{}
		for _, c := range counts {
			if c.Count > 0 {
				got[c.State] = c.Count
			}
		}
		require.Equal(t, tt.want, got, "namespaces %v", tt.namespaces)
	}
}

func testTaskActivity(t *testing.T, h *harness) {
	start := h.clock.Now()
	h.finishFour()
	act, err := h.s.TaskActivity(h.ctx, store.ActivityQuery{Since: start.Add(-time.Minute), Bucket: time.Minute})
	require.NoError(t, err)
	require.False(t, act.Truncated)
	byNS := map[string]store.ActivityBucket{}
	for _, b := range act.Buckets {
		sum := byNS[b.Namespace]
		sum.Finished += b.Finished
		sum.Failed += b.Failed
		sum.Waited += b.Waited
		sum.WaitTotal += b.WaitTotal
		byNS[b.Namespace] = sum
		require.False(t, b.Start.Before(start.Add(-time.Minute)), "bucket %v starts before the window", b.Start)
	}
	require.Equal(t, store.ActivityBucket{Finished: 2, Failed: 1, Waited: 2, WaitTotal: 2 * time.Second}, byNS["a"])
	require.Equal(t, store.ActivityBucket{Finished: 1, Waited: 1, WaitTotal: time.Second}, byNS["b"])

	later, err := h.s.TaskActivity(h.ctx, store.ActivityQuery{Since: h.clock.Now().Add(time.Second), Bucket: time.Minute})
	require.NoError(t, err)
	require.Empty(t, later.Buckets, "nothing finished after the window start")

	capped, err := h.s.TaskActivity(h.ctx, store.ActivityQuery{Since: start.Add(-time.Minute), Bucket: time.Minute, MaxTasks: 2})
	require.NoError(t, err)
	require.True(t, capped.Truncated)

	_, err = h.s.TaskActivity(h.ctx, store.ActivityQuery{Since: start})
	require.ErrorIs(t, err, store.ErrInvalid)

	// Bound to a namespace, the window reads its tasks alone: the others
	// neither show nor count towards MaxTasks.
	onlyB, err := h.s.TaskActivity(h.ctx, store.ActivityQuery{Since: start.Add(-time.Minute), Bucket: time.Minute, MaxTasks: 1, Namespaces: []string{"b"}})
	require.NoError(t, err)
	require.False(t, onlyB.Truncated)
	require.Len(t, onlyB.Buckets, 1)
	require.Equal(t, "b", onlyB.Buckets[0].Namespace)
}

func testListTasksByKey(t *testing.T, h *harness) {
	h.insert(store.TaskInsert{Namespace: "a", IdempotencyKey: "order-1"}, store.TaskInsert{Namespace: "b", IdempotencyKey: "order-1"},
		store.TaskInsert{Namespace: "a", IdempotencyKey: "order-2"}, store.TaskInsert{Namespace: "a"})
	both, err := h.s.ListTasks(h.ctx, store.TaskFilter{Key: "order-1"})
	require.NoError(t, err)
	require.Len(t, both, 2)
	one, err := h.s.ListTasks(h.ctx, store.TaskFilter{Key: "order-1", Namespace: "b"})
	require.NoError(t, err)
	require.Len(t, one, 1)
	require.Equal(t, "b", one[0].Namespace)

	// Namespaces bound what any filter selects; IDs select those tasks.
	bound, err := h.s.ListTasks(h.ctx, store.TaskFilter{Key: "order-1", Namespaces: []string{"b", "c"}})
	require.NoError(t, err)
	require.Len(t, bound, 1)
	require.Equal(t, "b", bound[0].Namespace)
	none, err := h.s.ListTasks(h.ctx, store.TaskFilter{Namespaces: []string{}})
	require.NoError(t, err)
	require.Empty(t, none, "no namespace selects nothing")
	byID, err := h.s.ListTasks(h.ctx, store.TaskFilter{IDs: []int64{both[0].ID, both[1].ID}, Namespaces: []string{both[1].Namespace}})
	require.NoError(t, err)
	require.Len(t, byID, 1)
	require.Equal(t, both[1].ID, byID[0].ID)
	ids, err := h.s.MatchTasks(h.ctx, store.TaskFilter{IDs: []int64{both[0].ID}, Namespaces: []string{both[1].Namespace}}, 10)
	require.NoError(t, err)
	require.Empty(t, ids, "a task outside the namespaces is not matched")
}
