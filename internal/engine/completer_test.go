package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/store"
)

// TestTransient: only what the store marks refused, or weft's own checks
// mark invalid, is not retried; everything else is taken to pass.
func TestTransient(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		err       error
		transient bool
	}{
		{"refused by the database", fmt.Errorf("record outcomes: %w", store.Refused(errors.New("SQLSTATE 22021"))), false},
		{"invalid", fmt.Errorf("%w outcome", store.ErrInvalid), false},
		{"connection lost", io.ErrUnexpectedEOF, true},
		{"deadline", fmt.Errorf("begin: %w", context.DeadlineExceeded), true},
		{"unknown", errors.New("failed to connect"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.transient, transient(tc.err))
		})
	}
	// Refused keeps the message and the wrapped error.
	inner := errors.New("ERROR: invalid byte sequence (SQLSTATE 22021)")
	err := store.Refused(inner)
	require.Equal(t, inner.Error(), err.Error())
	require.ErrorIs(t, err, inner)
	require.ErrorIs(t, err, store.ErrRefused)
}

// TestGather: an engine with little in flight writes what is queued at
// once, unless handlers launched with the first outcome's still run: then
// it waits for them (here up to an hour: until the engine stops); a busy
// one gathers what arrives until its period since the last write has
// passed (an hour too), and writes a full batch at once.
func TestGather(t *testing.T) {
	t.Parallel()
	const queued = 3
	for _, tc := range []struct {
		name string
		busy bool          // the last batch was full enough
		ago  time.Duration // since the last write
		// siblings: handlers launched with the first outcome's, still
		// running (-1: it was not launched with others).
		siblings int32
		// late: outcomes sent one at a time once gathering began, each
		// taken before the next is sent, then the engine stops.
		late int
		want int
	}{
		{"idle: what is queued", false, 0, -1, 0, 1 + queued},
		{"idle, siblings done: what is queued", false, 0, 0, 0, 1 + queued},
		{"idle, siblings running: what is queued and they send", false, 0, 2, 2, 1 + queued + 2},
		{"busy, period passed: what is queued", true, time.Hour, -1, 0, 1 + queued},
		{"busy, within the period: what arrives until the engine stops", true, 0, -1, 5, 1 + queued + 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			outbox := make(chan report, queued)
			for range queued {
				outbox <- report{}
			}
			g := newGatherer(outbox, func() int { return 0 }, time.Hour, time.Hour)
			defer g.stop()
			first := report{}
			if tc.siblings >= 0 {
				first.launched = newLaunchGroup(int(tc.siblings), time.Now())
			}
			n := 0
			if tc.busy {
				n = busyBatch
			}
			g.wrote(n, time.Now().Add(-tc.ago))
			done := make(chan int, 1)
			go func() { done <- len(g.gather([]report{first})) }()
			if tc.late > 0 {
				// Once the queued are taken, the buffer takes at most
				// queued more: each send past that needs gather to wait.
				for range tc.late {
					select {
					case outbox <- report{}:
					case n := <-done:
						t.Fatalf("gather returned %d without waiting", n)
					}
				}
				close(outbox)
			}
			select {
			case n := <-done:
				require.Equal(t, tc.want, n)
			case <-time.After(time.Minute):
				t.Fatal("gather did not return")
			}
		})
	}
	t.Run("busy: a full batch at once", func(t *testing.T) {
		t.Parallel()
		outbox := make(chan report, 2*maxBatch)
		for range 2 * maxBatch {
			outbox <- report{}
		}
		g := newGatherer(outbox, func() int { return 0 }, time.Hour, time.Hour)
		defer g.stop()
		g.wrote(busyBatch, time.Now())
		require.Len(t, g.gather([]report{{}}), maxBatch)
	})
}
