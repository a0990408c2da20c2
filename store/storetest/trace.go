package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// Traces: the traceparent stored with a task reaches every claim of its
// steps, and a claim says when its step became ready.

func testTraceParentAndReadyAt(t *testing.T, h *harness) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	submitted := h.clock.Now()
	const ts = "vendor=abc,other=1"
	traced := h.insert(store.TaskInsert{TraceParent: tp, TraceState: ts, Priority: 3, Steps: chain("a", "b")})[0].Task.ID
	h.clock.Advance(3 * time.Second)
	got := h.claim("e1", 1)
	require.Len(t, got, 1)
	require.Equal(t, traced, got[0].TaskID)
	require.Equal(t, tp, got[0].TraceParent)
	require.Equal(t, ts, got[0].TraceState)
	require.True(t, submitted.Equal(got[0].ReadyAt), "ready at submission, whatever its priority: %s", got[0].ReadyAt)
	require.Equal(t, 3*time.Second, got[0].StartedAt.Sub(got[0].ReadyAt), "the queue wait")

	held, err := h.s.HeldStep(h.ctx, "e1", got[0].Fence)
	require.NoError(t, err)
	require.Equal(t, tp, held.TraceParent)
	require.Equal(t, ts, held.TraceState)

	h.clock.Advance(time.Second)
	completed := h.clock.Now()
	h.ok(got[0], `{}`)
	h.clock.Advance(2 * time.Second)
	got = h.claim("e1", 1)
	require.Len(t, got, 1)
	require.Equal(t, "b", got[0].Name)
	require.Equal(t, tp, got[0].TraceParent, "every step of the task")
	require.Equal(t, ts, got[0].TraceState, "every step of the task")
	require.True(t, completed.Equal(got[0].ReadyAt), "ready when its dependency completed: %s", got[0].ReadyAt)

	// A task stored without one has none.
	plain := h.insert(store.TaskInsert{})[0].Task.ID
	got = h.claim("e1", 1)
	require.Len(t, got, 1)
	require.Equal(t, plain, got[0].TaskID)
	require.Empty(t, got[0].TraceParent)
	require.Equal(t, state.TaskRunning, h.task(plain).State)
}
