package engine

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestQuickGroup: after a claim that took every free slot, the claim loop
// waits for its handlers only while the last such claim's all returned
// within slotGather.
func TestQuickGroup(t *testing.T) {
	t.Parallel()
	ended := func(took time.Duration) *launchGroup {
		g := newLaunchGroup(1, time.Now().Add(-took))
		g.returned()
		g.took.Store(int64(took)) // as measured, whatever the clock did
		return g
	}
	for _, tc := range []struct {
		name string
		last *launchGroup
		wait bool
	}{
		{"no claim before", nil, true},
		{"last returned quickly", ended(slotGather / 10), true},
		{"last returned within the bound", ended(slotGather), true},
		{"last took longer", ended(2 * slotGather), false},
		{"last still running", newLaunchGroup(2, time.Now()), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.wait, quickGroup(tc.last))
		})
	}
}

// TestGatherSlots: the wait ends when the group's last handler returns,
// when the bound passes, or, reported, when the loop's context ends.
func TestGatherSlots(t *testing.T) {
	t.Parallel()
	t.Run("last handler returns", func(t *testing.T) {
		t.Parallel()
		g := newLaunchGroup(3, time.Now())
		done := make(chan bool)
		go func() { done <- gatherSlots(context.Background(), g, time.Hour) }()
		for range 3 {
			g.returned()
		}
		require.True(t, <-done)
		require.Positive(t, g.took.Load())
	})
	t.Run("bound passes", func(t *testing.T) {
		t.Parallel()
		require.True(t, gatherSlots(context.Background(), newLaunchGroup(1, time.Now()), time.Microsecond))
	})
	t.Run("context ends", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		require.False(t, gatherSlots(ctx, newLaunchGroup(1, time.Now()), time.Hour))
	})
}
