package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// Timers: ttl and good_until expiry, run_at.

func testExpireTTL(t *testing.T, h *harness) {
	steps := []store.StepInsert{{Name: "a", Handler: "h", MaxAttempts: 1, TTL: time.Minute}, {Name: "b", Handler: "h", MaxAttempts: 1, Deps: []int{0}}}
	expiring := h.insert(store.TaskInsert{Steps: steps})[0].Task.ID
	claimed := h.insert(store.TaskInsert{Steps: steps})[0].Task.ID
	// Claim the second task's first step: a started step never expires.
	got := h.claimWith(store.ClaimParams{EngineID: "e1", Limit: 1})
	require.Len(t, got, 1)
	if got[0].TaskID != claimed {
		expiring, claimed = claimed, expiring
	}
	h.clock.Advance(59 * time.Second)
	n, err := h.s.Expire(h.ctx, h.clock.Now(), "e1")
	require.NoError(t, err)
	require.Zero(t, n)
	h.clock.Advance(time.Second)
	n, err = h.s.Expire(h.ctx, h.clock.Now(), "e1")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	task := h.task(expiring)
	require.Equal(t, map[string]state.Step{"a": state.StepExpired, "b": state.StepSkipped}, states(task))
	require.Equal(t, state.TaskFailed, task.State)
	require.Equal(t, state.StepRunning, h.task(claimed).Steps[0].State)
}

func testExpireGoodUntil(t *testing.T, h *harness) {
	id := h.insert(store.TaskInsert{GoodUntil: h.clock.Now().Add(time.Minute), Steps: chain("a", "b")})[0].Task.ID
	h.clock.Advance(2 * time.Minute)
	n, err := h.s.Expire(h.ctx, h.clock.Now(), "e1")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	task := h.task(id)
	require.Equal(t, state.TaskExpired, task.State)
	require.Equal(t, map[string]state.Step{"a": state.StepExpired, "b": state.StepExpired}, states(task))
	// A task that started before good_until runs to its end.
	id = h.insert(store.TaskInsert{GoodUntil: h.clock.Now().Add(time.Minute)})[0].Task.ID
	c := h.claim("e1", 1)
	require.Len(t, c, 1)
	h.clock.Advance(2 * time.Minute)
	_, err = h.s.Expire(h.ctx, h.clock.Now(), "e1")
	require.NoError(t, err)
	require.Equal(t, state.TaskRunning, h.task(id).State)
}

func testRunAt(t *testing.T, h *harness) {
	id := h.insert(store.TaskInsert{RunAt: h.clock.Now().Add(time.Hour)})[0].Task.ID
	require.Equal(t, state.StepWaiting, h.task(id).Steps[0].State)
	require.Empty(t, h.claim("e1", 1))
	h.clock.Advance(time.Hour)
	n, err := h.s.Promote(h.ctx, h.clock.Now(), "e1")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Len(t, h.claim("e1", 1), 1)
}
