package maintenance

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/internal/event"
	"github.com/weftrun/weft/internal/health"
	"github.com/weftrun/weft/store/sqlite"
)

type webhooks struct{ leading bool }

func (w *webhooks) Lead(leader bool) { w.leading = leader }

// TestLeaderTakesTurns: of two engines on one store, the first to ask
// leads and the other does not; a round's first failure is what the
// loop's health reports.
func TestLeaderTakesTurns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "weft.db"), sqlite.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	leader := func(id string) (*Leader, *health.Monitor) {
		m := health.New(s, log, 10*time.Millisecond, func() string { return id })
		return New(s, Config{ID: func() string { return id }, Host: "h", LeaseTTL: time.Second, PollInterval: 10 * time.Millisecond,
			LeaderTTL: time.Minute, UpkeepInterval: time.Minute, Logger: log, Health: m, Events: &event.Bus{}, Followers: []interface{ Lead(bool) }{&webhooks{}},
			Overdue:       func(context.Context, time.Time) error { return nil },
			FireSchedules: func(context.Context) error { return nil }}), m
	}
	a, _ := leader("a")
	b, bHealth := leader("b")
	a.FirstRound(ctx)
	b.FirstRound(ctx)
	require.True(t, a.leading(time.Now()))
	require.False(t, b.leading(time.Now()))
	require.False(t, bHealth.Health().Degraded)

	b.fail(ctx, errors.New("first"))
	b.fail(ctx, errors.New("second"))
	require.Positive(t, b.endRound(ctx))
	require.Contains(t, bHealth.Health().Failing[health.LoopMaintenance], "first")
	require.Zero(t, b.endRound(ctx), "the next round succeeded")
	require.False(t, bHealth.Health().Degraded)

	n, err := a.ApplyRetention(ctx, time.Now())
	require.NoError(t, err)
	require.Zero(t, n)
}

// TestHistoryWindow: the history partitions' window is the longest
// retention, of a workflow's or a namespace's, at most 30 days, which is
// also the window without retention.
func TestHistoryWindow(t *testing.T) {
	t.Parallel()
	day := 24 * time.Hour
	for _, c := range []struct {
		keeps []time.Duration
		want  time.Duration
	}{
		{nil, 30 * day},
		{[]time.Duration{time.Hour, 7 * day, time.Minute}, 7 * day},
		{[]time.Duration{time.Hour, 90 * day}, 30 * day},
	} {
		var rules []retentionRule
		for _, k := range c.keeps {
			rules = append(rules, retentionRule{keep: k})
		}
		require.Equal(t, c.want, windowOf(rules), "%v", c.keeps)
	}
}
