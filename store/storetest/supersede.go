package storetest

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// Supersede: a submission that takes an existing idempotency key from the
// task holding it.

var supersedeTests = []struct {
	name string
	fn   func(t *testing.T, h *harness)
}{
	{"SupersedeCancelsUnfinished", testSupersedeUnfinished},
	{"SupersedeFinished", testSupersedeFinished},
}

func testSupersedeUnfinished(t *testing.T, h *harness) {
	h.register("e1")
	first := h.insert(store.TaskInsert{IdempotencyKey: "cart-7", Steps: chain("a", "b")})[0].Task.ID
	running := h.claimWith(store.ClaimParams{EngineID: "e1", Limit: 1, TaskID: first})
	require.Len(t, running, 1)

	// Without supersede, the key returns the first task.
	dup := h.insert(store.TaskInsert{IdempotencyKey: "cart-7"})[0]
	require.True(t, dup.Duplicate)
	require.Equal(t, first, dup.Task.ID)

	res := h.insert(store.TaskInsert{IdempotencyKey: "cart-7", Supersede: true})[0]
	require.False(t, res.Duplicate)
	require.NotEqual(t, first, res.Task.ID)
	require.Equal(t, first, res.Superseded)
	require.Equal(t, "cart-7", h.task(res.Task.ID).IdempotencyKey)

	old := h.task(first)
	require.Equal(t, state.TaskCancelled, old.State)
	require.Empty(t, old.IdempotencyKey, "the key moved to the new task")
	require.Equal(t, map[string]state.Step{"a": state.StepCancelled, "b": state.StepCancelled}, states(old))
	audit, err := h.s.Audit(h.ctx, first)
	require.NoError(t, err)
	last := audit[len(audit)-1]
	require.Contains(t, last.Reason, "superseded by task")
	var found bool
	for _, a := range audit {
		if a.Step == "" && a.To == string(state.TaskCancelled) {
			require.Equal(t, "superseded by task "+itoa(res.Task.ID)+` (idempotency key "cart-7")`, a.Reason)
			found = true
		}
	}
	require.True(t, found, "%+v", audit)

	// The superseded task's running step is lost to its holder.
	hb, err := h.s.Heartbeat(h.ctx, store.HeartbeatParams{EngineID: "e1", Now: h.clock.Now(), Held: []store.Fence{running[0].Fence}})
	require.NoError(t, err)
	require.Equal(t, []store.Fence{running[0].Fence}, hb.Lost)

	// Again: the second task gives way to a third.
	third := h.insert(store.TaskInsert{IdempotencyKey: "cart-7", Supersede: true})[0]
	require.Equal(t, res.Task.ID, third.Superseded)
	require.Equal(t, state.TaskCancelled, h.task(res.Task.ID).State)
}

func testSupersedeFinished(t *testing.T, h *harness) {
	first := h.insert(store.TaskInsert{IdempotencyKey: "report-may"})[0].Task.ID
	c := h.claimWith(store.ClaimParams{EngineID: "e1", Limit: 1, TaskID: first})
	h.ok(c[0], `{}`)
	require.Equal(t, state.TaskCompleted, h.task(first).State)

	res := h.insert(store.TaskInsert{IdempotencyKey: "report-may", Supersede: true})[0]
	require.False(t, res.Duplicate)
	require.Equal(t, first, res.Superseded)
	require.Equal(t, state.TaskCompleted, h.task(first).State, "a finished task stays as it ended")
	audit, err := h.s.Audit(h.ctx, first)
	require.NoError(t, err)
	require.Contains(t, audit[len(audit)-1].Reason, "superseded by task "+itoa(res.Task.ID))

	// A fresh key with supersede is a plain insert.
	fresh := h.insert(store.TaskInsert{IdempotencyKey: "report-june", Supersede: true})[0]
	require.Zero(t, fresh.Superseded)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
