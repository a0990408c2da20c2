package health

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/store"
)

type fileChecker struct{ err error }

func (f *fileChecker) CheckFile() error { return f.err }

// TestMonitor: a loop's failures make the engine degraded until the loop
// succeeds again, its errors are counted for good, and a database found
// replaced stays refused.
func TestMonitor(t *testing.T) {
	t.Parallel()
	f := &fileChecker{}
	m := New(f, slog.New(slog.NewTextHandler(io.Discard, nil)), time.Millisecond, func() string { return "e1" })
	require.False(t, m.Health().Degraded)

	wait := m.Failed(context.Background(), LoopClaim, "claim", errors.New("down"))
	require.Positive(t, wait)
	h := m.Health()
	require.True(t, h.Degraded)
	require.Contains(t, h.Failing[LoopClaim], "down")
	m.Succeeded(LoopClaim)
	h = m.Health()
	require.False(t, h.Degraded)
	require.Equal(t, uint64(1), h.Errors[LoopClaim])

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.Zero(t, m.Failed(ctx, LoopClaim, "claim", errors.New("stopping")), "a failure of a loop that ends is not one")

	f.err = errors.New("stat failed")
	require.NoError(t, m.CheckFile(), "a check that could not tell refuses nothing")
	f.err = store.ErrDatabaseGone
	require.ErrorIs(t, m.CheckFile(), store.ErrDatabaseGone)
	f.err = nil
	require.ErrorIs(t, m.DatabaseGone(), store.ErrDatabaseGone, "refused for good")
	require.True(t, m.Health().Degraded)
	require.NoError(t, New(struct{}{}, slog.Default(), time.Millisecond, nil).CheckFile(), "a store that cannot tell")
}
