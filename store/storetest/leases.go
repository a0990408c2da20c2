package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// Leases: the maintenance leader, the reaper and heartbeats.

func testLeaderElection(t *testing.T, h *harness) {
	const ttl = 10 * time.Second
	lead := func(engine string) bool {
		t.Helper()
		ok, err := h.s.Lead(h.ctx, engine, h.clock.Now(), ttl)
		require.NoError(t, err)
		return ok
	}
	leaders := func() []string {
		t.Helper()
		engines, err := h.s.ListEngines(h.ctx)
		require.NoError(t, err)
		var ids []string
		for _, e := range engines {
			if e.Leader {
				ids = append(ids, e.ID)
			}
		}
		return ids
	}
	for _, e := range []string{"e1", "e2", "e3"} {
		h.register(e)
	}
	require.True(t, lead("e1"), "the first engine to ask leads")
	require.False(t, lead("e2"), "one leader at a time")
	require.Equal(t, []string{"e1"}, leaders())

	// The leader renews before its lease runs out and keeps it.
	h.clock.Advance(ttl - time.Second)
	require.True(t, lead("e1"))
	h.clock.Advance(ttl - time.Second)
	require.False(t, lead("e2"), "a renewed lease still holds")

	// A leader that stops renewing is replaced once its lease lapses.
	h.clock.Advance(2 * time.Second)
	require.Empty(t, leaders(), "a lapsed lease is no leadership")
	require.True(t, lead("e2"))
	require.False(t, lead("e1"), "the old leader does not take it back")
	require.Equal(t, []string{"e2"}, leaders())

	// A leader that stops gives the lease up at once.
	require.NoError(t, h.s.StopEngine(h.ctx, "e2"))
	require.True(t, lead("e3"))

	// So does a leader the reaper declares dead.
	_, err := h.s.Reap(h.ctx, h.clock.Now(), h.clock.Now().Add(-time.Minute), []string{"e3"}, "e1")
	require.NoError(t, err)
	require.Empty(t, leaders())
	require.True(t, lead("e1"))
	// The engine declared dead, whose lease had not run out when it was
	// reaped, does not get it back by renewing.
	require.False(t, lead("e3"), "a reaped leader does not renew a lease another engine took")
	require.Equal(t, []string{"e1"}, leaders())
	// A leader renews its lease again and again, each renewal from now.
	for range 3 {
		h.clock.Advance(ttl / 2)
		require.True(t, lead("e1"))
	}
	h.clock.Advance(ttl - time.Second)
	require.False(t, lead("e2"), "the last renewal holds a full ttl")
	require.Equal(t, []string{"e1"}, leaders())
}

func testReap(t *testing.T, h *harness) {
	h.register("e1")
	h.register("e2")
	h.insert(store.TaskInsert{}, store.TaskInsert{})
	got := h.claim("e1", 2)
	require.Len(t, got, 2)
	// e2 heartbeats, e1 does not: only e1 lapses.
	h.clock.Advance(time.Minute)
	_, err := h.s.Heartbeat(h.ctx, store.HeartbeatParams{EngineID: "e2", Now: h.clock.Now()})
	require.NoError(t, err)
	n, err := h.s.Reap(h.ctx, h.clock.Now(), h.clock.Now().Add(-30*time.Second), nil, "e2")
	require.NoError(t, err)
	require.Equal(t, 2, n)
	task := h.task(got[0].TaskID)
	require.Equal(t, state.StepReady, task.Steps[0].State)
	require.Equal(t, 1, task.Steps[0].Attempts, "the lapsed attempt counts")
	require.Contains(t, task.Steps[0].Error, "lease lapsed")
	_, err = h.s.Heartbeat(h.ctx, store.HeartbeatParams{EngineID: "e1", Now: h.clock.Now()})
	require.ErrorIs(t, err, store.ErrEngineLost)
	_, err = h.s.ClaimSteps(h.ctx, store.ClaimParams{EngineID: "e1", Limit: 1, Now: h.clock.Now()})
	require.ErrorIs(t, err, store.ErrEngineLost, "an engine declared dead claims nothing")
	engines, err := h.s.ListEngines(h.ctx)
	require.NoError(t, err)
	require.Len(t, engines, 1)
	require.Equal(t, "e2", engines[0].ID)
	// Nothing more to reap.
	n, err = h.s.Reap(h.ctx, h.clock.Now(), h.clock.Now().Add(-30*time.Second), nil, "e2")
	require.NoError(t, err)
	require.Zero(t, n)
	// A stopped engine's steps are reaped at once.
	c := h.claim("e2", 1)[0]
	require.NoError(t, h.s.StopEngine(h.ctx, "e2"))
	h.register("e3")
	n, err = h.s.Reap(h.ctx, h.clock.Now(), h.clock.Now().Add(-time.Hour), nil, "e3")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	stopped := h.task(c.TaskID).Steps[0]
	require.Equal(t, state.StepReady, stopped.State)
	require.Contains(t, stopped.Error, "interrupted: engine e2 stopped during attempt", "a shutdown cut it short: no lease lapsed")
	// The dead engine claims nothing under a backlog either (the last
	// claim took all it asked for), where a claim may go in one
	// statement whose gate checks the engine: with a step ready, and with
	// none.
	for _, ready := range []string{"a step ready", "none ready"} {
		require.Len(t, h.claim("e3", 1), 1)
		_, err = h.s.ClaimSteps(h.ctx, store.ClaimParams{EngineID: "e1", Limit: 1, Now: h.clock.Now()})
		require.ErrorIs(t, err, store.ErrEngineLost, ready)
	}
}

func testReapExhausted(t *testing.T, h *harness) {
	h.register("e1")
	h.insert(store.TaskInsert{Steps: []store.StepInsert{{Name: "a", Handler: "h", MaxAttempts: 1}, {Name: "b", Handler: "h", MaxAttempts: 1, Deps: []int{0}}}})
	c := h.claim("e1", 1)[0]
	_, err := h.s.Reap(h.ctx, h.clock.Now(), h.clock.Now(), []string{"e1"}, "e2")
	require.NoError(t, err)
	task := h.task(c.TaskID)
	require.Equal(t, map[string]state.Step{"a": state.StepFailed, "b": state.StepSkipped}, states(task))
	require.Equal(t, state.TaskFailed, task.State)
}

func testHeartbeatLost(t *testing.T, h *harness) {
	h.register("e1")
	h.insert(store.TaskInsert{}, store.TaskInsert{})
	got := h.claim("e1", 2)
	// Fences of one claim (one lease, one attempt): both held, nothing lost.
	res, err := h.s.Heartbeat(h.ctx, store.HeartbeatParams{EngineID: "e1", Now: h.clock.Now(), Held: []store.Fence{got[0].Fence, got[1].Fence}})
	require.NoError(t, err)
	require.Empty(t, res.Lost)
	_, err = h.s.CancelTask(h.ctx, got[0].TaskID, "", "test")
	require.NoError(t, err)
	stale := got[1].Fence
	stale.LeaseID++
	res, err = h.s.Heartbeat(h.ctx, store.HeartbeatParams{EngineID: "e1", Now: h.clock.Now(), Held: []store.Fence{got[0].Fence, got[1].Fence, stale}})
	require.NoError(t, err)
	require.ElementsMatch(t, []store.Fence{got[0].Fence, stale}, res.Lost)
	require.Zero(t, res.Released, "an incomplete list releases nothing")
	// Another engine's fence is not held by this one: lost to it, and
	// the step runs on under its holder.
	h.register("e2")
	res, err = h.s.Heartbeat(h.ctx, store.HeartbeatParams{EngineID: "e2", Now: h.clock.Now(), Held: []store.Fence{got[1].Fence}})
	require.NoError(t, err)
	require.Equal(t, []store.Fence{got[1].Fence}, res.Lost)
	res, err = h.s.Heartbeat(h.ctx, store.HeartbeatParams{EngineID: "e1", Now: h.clock.Now(), Held: []store.Fence{got[1].Fence}})
	require.NoError(t, err)
	require.Empty(t, res.Lost, "its holder still holds it")
}

// testWorkerOwner: a remote worker's row keeps the principal that
// registered it, and an engine's row says it is no worker.
func testWorkerOwner(t *testing.T, h *harness) {
	h.register("e1")
	require.NoError(t, h.s.RegisterEngine(h.ctx, store.EngineInfo{ID: "w1", Host: "remote worker w", StartedAt: h.clock.Now(),
		Worker: true, Owner: "api_key:k1"}))
	tests := []struct {
		id     string
		worker bool
		owner  string
	}{
		{"e1", false, ""},
		{"w1", true, "api_key:k1"},
	}
	for _, tt := range tests {
		e, err := h.s.GetEngine(h.ctx, tt.id)
		require.NoError(t, err, tt.id)
		require.Equal(t, tt.id, e.ID)
		require.Equal(t, tt.worker, e.Worker, tt.id)
		require.Equal(t, tt.owner, e.Owner, tt.id)
	}
	// A stopped worker is still found, with its owner.
	require.NoError(t, h.s.StopEngine(h.ctx, "w1"))
	e, err := h.s.GetEngine(h.ctx, "w1")
	require.NoError(t, err)
	require.Equal(t, "api_key:k1", e.Owner)
	_, err = h.s.GetEngine(h.ctx, "nobody")
	require.ErrorIs(t, err, store.ErrNotFound)
	live, err := h.s.ListEngines(h.ctx)
	require.NoError(t, err)
	require.Len(t, live, 1)
	require.False(t, live[0].Worker)
}

// testClaimBesideReap: claims of an engine race the reap that declares it
// dead. Whatever the order, once the reaper has run again no step is left
// running under the dead engine: a claim that committed after the reap
// read the engine's steps must not leave them to no one.
func testClaimBesideReap(t *testing.T, h *harness) {
	const rounds, tasks, claimers = 40, 16, 3
	for r := range rounds {
		engine := fmt.Sprintf("race%d", r)
		h.register(engine)
		in := make([]store.TaskInsert, tasks)
		for i := range in {
			in[i] = store.TaskInsert{Namespace: "race"}
		}
		var ids []int64
		for _, res := range h.insert(in...) {
			ids = append(ids, res.Task.ID)
		}
		var wg sync.WaitGroup
		var f faults
		for range claimers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					got, err := h.s.ClaimSteps(h.ctx, store.ClaimParams{EngineID: engine, Limit: 2, Namespaces: []string{"race"}, Now: h.clock.Now()})
					if errors.Is(err, store.ErrEngineLost) || f.failed(err) || len(got) == 0 {
						return
					}
				}
			}()
		}
		_, err := h.s.Reap(h.ctx, h.clock.Now(), h.clock.Now(), []string{engine}, "reaper")
		f.failed(err)
		wg.Wait()
		f.check(t, true)
		_, err = h.s.Reap(h.ctx, h.clock.Now(), h.clock.Now(), nil, "reaper")
		require.NoError(t, err)
		for _, id := range ids {
			for _, s := range h.task(id).Steps {
				require.False(t, s.State == state.StepRunning && s.EngineID == engine,
					"round %d: step %d left running under engine %s, declared dead", r, s.ID, engine)
			}
		}
	}
}
