package slots

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTryTake(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		size      int
		takes     []int
		wantTaken []int
		wantFree  int
	}{
		{"within size", 4, []int{3}, []int{3}, 1},
		{"more than free", 2, []int{5}, []int{2}, 0},
		{"empty pool", 1, []int{1, 1}, []int{1, 0}, 0},
		{"zero", 3, []int{0}, []int{0}, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := New(tt.size)
			for i, n := range tt.takes {
				require.Equal(t, tt.wantTaken[i], p.TryTake(n))
			}
			require.Equal(t, tt.wantFree, p.Free())
		})
	}
}

func TestReleaseWakesClaimLoop(t *testing.T) {
	t.Parallel()
	p := New(1)
	require.Equal(t, 1, p.TryTake(1))
	p.Release()
	<-p.Changed()
	require.Equal(t, 1, p.Free())
}

// TestReturnWakesClaimLoopThatFoundNone: slots taken by one taker and
// given back unused wake the claim loop if it found none free meanwhile,
// and only then.
func TestReturnWakesClaimLoopThatFoundNone(t *testing.T) {
	t.Parallel()
	p := New(2)
	require.Equal(t, 2, p.TryTake(2))
	p.Return(1)
	select {
	case <-p.Changed():
		t.Fatal("nobody found the pool empty: no wake")
	default:
	}
	require.Equal(t, 1, p.TryTake(1))
	require.Equal(t, 0, p.TryTake(5), "the claim loop finds none")
	p.Return(1)
	<-p.Changed()
	require.Equal(t, 1, p.Free())
}

func TestWaiterHasPriorityOverClaimLoop(t *testing.T) {
	t.Parallel()
	p := New(1)
	require.Equal(t, 1, p.TryTake(1))
	got := make(chan error)
	go func() { got <- p.Take(context.Background()) }()
	// Wait until the waiter is queued.
	for {
		p.mu.Lock()
		n := len(p.waiters)
		p.mu.Unlock()
		if n == 1 {
			break
		}
	}
	p.Release()
	require.NoError(t, <-got)
	require.Equal(t, 0, p.TryTake(1), "the released slot went to the waiter, not the pool")
}

func TestTakeCancelled(t *testing.T) {
	t.Parallel()
	p := New(1)
	require.Equal(t, 1, p.TryTake(1))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, p.Take(ctx), context.Canceled)
	p.Release()
	require.Equal(t, 1, p.Free(), "a cancelled waiter does not keep a slot")
}

func TestReturnDoesNotWakeClaimLoop(t *testing.T) {
	t.Parallel()
	p := New(3)
	require.Equal(t, 3, p.TryTake(3))
	p.Return(2)
	require.Equal(t, 2, p.Free())
	select {
	case <-p.Changed():
		t.Fatal("Return signalled the claim loop")
	default:
	}
}
