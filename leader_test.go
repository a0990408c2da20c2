package weft_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/workflow"
)

// leaders returns the ids of the engines holding the maintenance lease.
func leaders(t *testing.T, s store.Store) []string {
	t.Helper()
	engines, err := s.ListEngines(context.Background())
	require.NoError(t, err)
	var ids []string
	for _, e := range engines {
		if e.Leader {
			ids = append(ids, e.ID)
		}
	}
	return ids
}

// TestMaintenanceLeader: one engine per database leads maintenance; when a
// leader vanishes without a word another takes over once its lease lapses,
// and when a leader stops the lease passes on at once. Maintenance that
// only the leader runs (promoting a delayed task) goes on throughout.
func TestMaintenanceLeader(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		ctx := context.Background()
		s := open(t)
		// A leader on another host that dies: its lease must lapse. It
		// outlasts the engines' start on a loaded machine, so that they
		// meet it live.
		require.NoError(t, s.RegisterEngine(ctx, store.EngineInfo{ID: "ghost", Host: "elsewhere", PID: 1, StartedAt: time.Now()}))
		ok, err := s.Lead(ctx, "ghost", time.Now(), 3*time.Second)
		require.NoError(t, err)
		require.True(t, ok)

		cfg := weft.Config{LeaderTTL: 300 * time.Millisecond}
		a, b := newEngine(t, s, cfg), newEngine(t, s, cfg)
		for _, e := range []*weft.Engine{a, b} {
			e.Handle("h", func(ctx context.Context, at *weft.Attempt) (any, error) { return "ok", nil })
			register(t, e, workflow.New("lead", "wf", "1").Step("s", "h"))
			start(t, e)
		}
		require.Equal(t, []string{"ghost"}, leaders(t, s), "a live lease is respected")

		eventually(t, "an engine to take over the lapsed lease", func() bool {
			l := leaders(t, s)
			return len(l) == 1 && (l[0] == a.ID() || l[0] == b.ID())
		})
		// A delayed task is promoted by whoever leads.
		delayed := submit(t, a, weft.Submission{Workflow: "lead/wf", RunAt: time.Now().Add(100 * time.Millisecond)})
		require.Equal(t, "completed", string(wait(t, a, delayed.Task.ID).State))

		// The leader now: with a 300 ms lease, a slow machine may let it
		// lapse for a moment between two renewals.
		var leader, other *weft.Engine
		eventually(t, "one of the engines to lead", func() bool {
			switch l := leaders(t, s); {
			case len(l) != 1:
				return false
			case l[0] == a.ID():
				leader, other = a, b
			case l[0] == b.ID():
				leader, other = b, a
			}
			return leader != nil
		})
		stopCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		require.NoError(t, leader.Stop(stopCtx))
		eventually(t, "the other engine to lead after the leader stopped", func() bool {
			l := leaders(t, s)
			return len(l) == 1 && l[0] == other.ID()
		})
		delayed = submit(t, other, weft.Submission{Workflow: "lead/wf", RunAt: time.Now().Add(100 * time.Millisecond)})
		require.Equal(t, "completed", string(wait(t, other, delayed.Task.ID).State))
	})
}

func TestLeaderTTLValidated(t *testing.T) {
	t.Parallel()
	_, err := weft.New(backends()["sqlite"](t), weft.Config{PollInterval: time.Second, LeaderTTL: time.Second})
	require.ErrorContains(t, err, "LeaderTTL (1s) must be at least three times PollInterval (1s)")
}
