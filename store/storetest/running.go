package storetest

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// runningTests are the conformance tests of what holds and bounds running
// steps: complete heartbeats that release what the holder never received,
// the holder's view of one step, and step timeouts kept in the database.
var runningTests = []struct {
	name string
	fn   func(t *testing.T, h *harness)
}{
	{"HeartbeatReleasesUnheld", testHeartbeatReleasesUnheld},
}

// drainWake empties the store's wake channel.
func (h *harness) drainWake() {
	select {
	case <-h.s.Wake():
	default:
	}
}

func testHeartbeatReleasesUnheld(t *testing.T, h *harness) {
	type claimed = []store.ClaimedStep
	tests := []struct {
		name string
		// held lists the fences the heartbeat reports, from the two
		// steps the engine claimed.
		held     func(got claimed) []store.Fence
		complete bool
		// cutoff is ClaimedBefore, from the time of the claim.
		cutoff func(claimedAt time.Time) time.Time
		// released are indexes into the claimed steps. A listed fence
		// that is not one of theirs is expected back as lost.
		released []int
	}{
		{
			name:     "complete list, claimed before the cutoff",
			held:     func(got claimed) []store.Fence { return []store.Fence{got[0].Fence} },
			complete: true,
			cutoff:   func(at time.Time) time.Time { return at.Add(time.Second) },
			released: []int{1},
		},
		{
			name:     "complete list, claimed after the cutoff",
			held:     func(got claimed) []store.Fence { return []store.Fence{got[0].Fence} },
			complete: true,
			cutoff:   func(at time.Time) time.Time { return at.Add(-time.Second) },
		},
		{
			name:     "complete list, claimed at the cutoff",
			held:     func(got claimed) []store.Fence { return []store.Fence{got[0].Fence} },
			complete: true,
			cutoff:   func(at time.Time) time.Time { return at },
		},
		{
			name:     "complete list, no cutoff",
			held:     func(got claimed) []store.Fence { return []store.Fence{got[0].Fence} },
			complete: true,
			cutoff:   func(time.Time) time.Time { return time.Time{} },
		},
		{
			name:   "incomplete list",
			held:   func(got claimed) []store.Fence { return []store.Fence{got[0].Fence} },
			cutoff: func(at time.Time) time.Time { return at.Add(time.Second) },
		},
		{
			name:     "complete list, nothing held",
			held:     func(claimed) []store.Fence { return nil },
			complete: true,
			cutoff:   func(at time.Time) time.Time { return at.Add(time.Second) },
			released: []int{0, 1},
		},
		{
			// A listed fence of another attempt is lost, and the attempt
			// that does run is not held by this holder.
			name: "complete list with a stale fence",
			held: func(got claimed) []store.Fence {
				stale := got[1].Fence
				stale.LeaseID++
				return []store.Fence{got[0].Fence, stale}
			},
			complete: true,
			cutoff:   func(at time.Time) time.Time { return at.Add(time.Second) },
			released: []int{1},
		},
	}
	for i, tt := range tests {
		// Each case claims its own two steps (by handler) under its own
		// engine, on the same store.
		engine, handler := "x"+string(rune('a'+i)), "h"+string(rune('a'+i))
		h.register(engine)
		steps := []store.StepInsert{{Name: "only", Handler: handler, MaxAttempts: 3}}
		h.insert(store.TaskInsert{Steps: steps}, store.TaskInsert{Steps: steps})
		claimedAt := h.clock.Now()
		got := h.claimWith(store.ClaimParams{EngineID: engine, Limit: 2, Handlers: []string{handler}})
		require.Len(t, got, 2, tt.name)
		h.clock.Advance(time.Minute)
		h.drainWake()

		held := tt.held(got)
		res, err := h.s.Heartbeat(h.ctx, store.HeartbeatParams{EngineID: engine, Now: h.clock.Now(), Held: held,
			Complete: tt.complete, ClaimedBefore: tt.cutoff(claimedAt)})
		require.NoError(t, err, tt.name)
		require.Equal(t, len(tt.released), res.Released, tt.name)
		var wantLost []store.Fence
		for _, f := range held {
			if f != got[0].Fence && f != got[1].Fence {
				wantLost = append(wantLost, f)
			}
		}
		require.ElementsMatch(t, wantLost, res.Lost, tt.name)

		for j, c := range got {
			step := h.task(c.TaskID).Steps[0]
			if !slices.Contains(tt.released, j) {
				require.Equal(t, state.StepRunning, step.State, "%s: step %d", tt.name, j)
				require.Equal(t, 1, step.Attempts, "%s: step %d", tt.name, j)
				continue
			}
			require.Equal(t, state.StepReady, step.State, "%s: step %d", tt.name, j)
			require.Zero(t, step.Attempts, "%s: the attempt the holder never received is given back", tt.name)
			entries, err := h.s.Audit(h.ctx, c.TaskID)
			require.NoError(t, err)
			last := entries[len(entries)-1]
			require.Equal(t, store.AuditEntry{ID: last.ID, TaskID: c.TaskID, Step: "only", From: "running", To: "ready", At: last.At,
				Attempt: 1, EngineID: engine, Reason: "released: not held by its worker"}, last, tt.name)
		}
		if len(tt.released) == 0 {
			continue
		}
		select {
		case <-h.s.Wake():
		default:
			t.Fatalf("%s: releasing steps must wake the engines waiting for work", tt.name)
		}
		// The released steps are claimable at once, under the attempt
		// number they had.
		again := h.claimWith(store.ClaimParams{EngineID: engine, Limit: 10, Handlers: []string{handler}})
		require.Len(t, again, len(tt.released), tt.name)
		for _, c := range again {
			require.Equal(t, 1, c.Attempts, tt.name)
		}
	}
	// A heartbeat of an engine declared dead releases nothing and says so.
	_, err := h.s.Reap(h.ctx, h.clock.Now(), h.clock.Now(), []string{"xa"}, "e1")
	require.NoError(t, err)
	_, err = h.s.Heartbeat(h.ctx, store.HeartbeatParams{EngineID: "xa", Now: h.clock.Now(), Complete: true, ClaimedBefore: h.clock.Now()})
	require.ErrorIs(t, err, store.ErrEngineLost)
}
