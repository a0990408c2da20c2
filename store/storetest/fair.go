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

// fairTests are the conformance tests of the fair shares: namespace weights
// that share the claims between namespaces with ready work.
var fairTests = []struct {
	name string
	fn   func(t *testing.T, h *harness)
}{
	{"FairWeightsAreValidated", testFairValidation},
	{"FairSharesByWeight", testFairShares},
	{"FairUnweightedCountsAsOne", testFairUnweighted},
	{"FairKeepsPriorityInsideNamespace", testFairPriority},
	{"FairNoWeightsIsGlobalOrder", testFairNoWeights},
	{"FairUsesSlotsAWeightCannot", testFairWorkConserving},
	{"FairSharesUnderConcurrentClaims", testFairConcurrent},
	{"FairSharesWithANamespaceThatJoins", testFairJoins},
}

// backlog inserts n one-step tasks in each namespace, interleaved.
func (h *harness) backlog(n int, namespaces ...string) {
	h.t.Helper()
	var in []store.TaskInsert
	for range n {
		for _, ns := range namespaces {
			in = append(in, store.TaskInsert{Namespace: ns})
		}
	}
	h.insert(in...)
}

// saturate claims one slot at a time, count times, with at most inFlight
// steps running: when they are all running, the oldest completes first. It
// returns how many claims each namespace got, once all have completed.
func (h *harness) saturate(count, inFlight int) map[string]int {
	h.t.Helper()
	got := map[string]int{}
	var running []store.ClaimedStep
	for range count {
		if len(running) == inFlight {
			h.ok(running[0], `{}`)
			running = running[1:]
		}
		c := h.claim("e1", 1)
		require.Len(h.t, c, 1, "the backlog ran dry")
		got[c[0].Namespace]++
		running = append(running, c[0])
	}
	for _, c := range running {
		h.ok(c, `{}`)
	}
	return got
}

// requireShares checks each namespace's share of the claims is within 10%
// of its ideal share (weight over the sum of weights).
func requireShares(t *testing.T, got map[string]int, weights map[string]int, msgAndArgs ...any) {
	t.Helper()
	total, sum := 0, 0
	for _, n := range got {
		total += n
	}
	for _, w := range weights {
		sum += w
	}
	for ns, w := range weights {
		ideal := float64(w) / float64(sum)
		share := float64(got[ns]) / float64(total)
		require.InDelta(t, ideal, share, ideal*0.1, "share of %s in %v %s", ns, got, fmt.Sprint(msgAndArgs...))
	}
}

func testFairValidation(t *testing.T, h *harness) {
	for _, tt := range []struct {
		name string
		c    store.PolicyChange
		want string
	}{
		{"workflow", store.PolicyChange{Target: "shop/checkout", Weight: ptr(2), Actor: "a"}, "set on a namespace"},
		{"all", store.PolicyChange{Target: store.TargetAll, Weight: ptr(2), Actor: "a"}, "set on a namespace"},
		{"negative", store.PolicyChange{Target: "shop", Weight: ptr(-1), Actor: "a"}, "from 1 to 1000"},
		{"too big", store.PolicyChange{Target: "shop", Weight: ptr(1001), Actor: "a"}, "from 1 to 1000"},
	} {
		_, err := h.s.SetPolicy(h.ctx, tt.c)
		require.ErrorIs(t, err, store.ErrInvalid, tt.name)
		require.ErrorContains(t, err, tt.want, tt.name)
	}

	p := h.setPolicy(store.PolicyChange{Target: "shop", Weight: ptr(3), Actor: "cli:alice", Reason: "black friday"})
	require.Equal(t, 3, p.Weight)
	h.setPolicy(store.PolicyChange{Target: "shop", Concurrency: ptr(8)})
	r, err := h.s.ListPolicies(h.ctx)
	require.NoError(t, err)
	require.Len(t, r.Policies, 1)
	require.Equal(t, 3, r.Policies[0].Weight, "a change of the limit keeps the weight")
	require.Equal(t, 8, r.Policies[0].Concurrency)

	h.setPolicy(store.PolicyChange{Target: "shop", Concurrency: ptr(0)})
	h.setPolicy(store.PolicyChange{Target: "shop", Weight: ptr(1), Actor: "cli:bob"})
	r, err = h.s.ListPolicies(h.ctx)
	require.NoError(t, err)
	require.Empty(t, r.Policies, "weight 1 is the default: nothing is left set")

	changes, err := h.s.PolicyChanges(h.ctx, 0)
	require.NoError(t, err)
	require.Len(t, changes, 4)
	require.Equal(t, "weight=1", changes[0].Change)
	require.Equal(t, "cli:bob", changes[0].Actor)
	require.Equal(t, "weight=3", changes[3].Change)
	require.Equal(t, "black friday", changes[3].Reason)
}

func testFairShares(t *testing.T, h *harness) {
	h.backlog(250, "other", "shop")
	h.setPolicy(store.PolicyChange{Target: "shop", Weight: ptr(3)})
	for _, inFlight := range []int{1, 2, 3, 4, 8} {
		got := h.saturate(40, inFlight)
		requireShares(t, got, map[string]int{"shop": 3, "other": 1}, inFlight, " in flight")
	}
}

func testFairUnweighted(t *testing.T, h *harness) {
	h.backlog(60, "a", "b", "c")
	h.setPolicy(store.PolicyChange{Target: "a", Weight: ptr(2)})
	got := h.saturate(80, 4)
	requireShares(t, got, map[string]int{"a": 2, "b": 1, "c": 1})
}

func testFairPriority(t *testing.T, h *harness) {
	// Low priority first, so that the ready queue would give them first
	// without priorities.
	for range 3 {
		h.insert(store.TaskInsert{Namespace: "shop", Steps: chain("low")}, store.TaskInsert{Namespace: "other", Steps: chain("low")})
	}
	h.clock.Advance(time.Second)
	for range 3 {
		h.insert(store.TaskInsert{Namespace: "shop", Priority: 9, Steps: chain("high")}, store.TaskInsert{Namespace: "other", Priority: 9, Steps: chain("high")})
	}
	h.setPolicy(store.PolicyChange{Target: "shop", Weight: ptr(3)})
	got := h.claim("e1", 4)
	byNS := map[string][]string{}
	for _, c := range got {
		byNS[c.Namespace] = append(byNS[c.Namespace], c.Name)
	}
	require.Equal(t, map[string][]string{"shop": {"high", "high", "high"}, "other": {"high"}}, byNS,
		"shares by weight, and each namespace's best steps first")
}

func testFairNoWeights(t *testing.T, h *harness) {
	for range 5 {
		h.insert(store.TaskInsert{Namespace: "early"})
	}
	h.clock.Advance(time.Second)
	for range 5 {
		h.insert(store.TaskInsert{Namespace: "late"})
	}
	// A weight set back to the default leaves the global order.
	h.setPolicy(store.PolicyChange{Target: "late", Weight: ptr(4)})
	h.setPolicy(store.PolicyChange{Target: "late", Weight: ptr(0)})
	require.Equal(t, map[string]int{"early/wf": 4}, claimedWorkflows(h.claim("e1", 4)),
		"without weights the oldest ready steps go first, whatever their namespace")
	h.setPolicy(store.PolicyChange{Target: "late", Weight: ptr(4)})
	require.Equal(t, map[string]int{"late/wf": 4}, claimedWorkflows(h.claim("e1", 4)),
		"with weights, running steps count: early has 4 running to late's 0")
}

// testFairWorkConserving: slots a namespace cannot use (too few ready
// steps, a paused workflow, a limit) go to the others in the same claim.
func testFairWorkConserving(t *testing.T, h *harness) {
	h.backlog(2, "small")
	h.backlog(10, "big")
	h.insert(store.TaskInsert{Namespace: "held", Workflow: "paused", Version: "1"}, store.TaskInsert{Namespace: "held", Workflow: "paused", Version: "1"})
	h.backlog(5, "capped")
	h.setPolicy(store.PolicyChange{Target: "small", Weight: ptr(10)})
	h.setPolicy(store.PolicyChange{Target: "held", Weight: ptr(10)})
	h.setPolicy(store.PolicyChange{Target: "held/paused", Paused: ptr(true)})
	h.setPolicy(store.PolicyChange{Target: "capped", Weight: ptr(10), Concurrency: ptr(1)})
	got := claimedWorkflows(h.claim("e1", 10))
	require.Equal(t, map[string]int{"small/wf": 2, "capped/wf": 1, "big/wf": 7}, got)
}

// testFairConcurrent claims from several goroutines, each its own engine,
// with steps of equal length: the oldest of all running steps completes
// when inFlight run. The running steps are counted in the database, so the
// shares hold across claimers.
func testFairConcurrent(t *testing.T, h *harness) {
	h.backlog(200, "other", "shop")
	h.setPolicy(store.PolicyChange{Target: "shop", Weight: ptr(3)})
	const claimers, inFlight, claims = 4, 8, 40
	var mu sync.Mutex
	got := map[string]int{}
	var running []store.ClaimedStep
	var wg sync.WaitGroup
	for g := range claimers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			engine := fmt.Sprintf("e%d", g)
			for n := 0; n < claims; {
				mu.Lock()
				var done []store.Outcome
				if len(running) >= inFlight {
					done = []store.Outcome{{Fence: running[0].Fence, EngineID: engine, State: state.StepCompleted, Result: []byte(`{}`)}}
					running = running[1:]
				}
				mu.Unlock()
				if _, err := h.s.CompleteSteps(h.ctx, done); err != nil {
					t.Errorf("complete: %v", err)
					return
				}
				c, err := h.s.ClaimSteps(h.ctx, store.ClaimParams{EngineID: engine, Limit: 1, Now: h.clock.Now()})
				switch {
				case errors.Is(err, store.ErrUnavailable):
					continue // busy database: try again
				case err != nil:
					t.Errorf("claim: %v", err)
					return
				case len(c) != 1:
					t.Errorf("claim: got %d steps, the backlog is not dry", len(c))
					return
				}
				n++
				mu.Lock()
				running = append(running, c[0])
				got[c[0].Namespace]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	requireShares(t, got, map[string]int{"shop": 3, "other": 1})
}

// testFairJoins: while one namespace alone has ready work the claims share
// nothing; a namespace that then gets ready work, named before or after
// it, has its share from the next claims on, although the first one's
// steps are older.
func testFairJoins(t *testing.T, h *harness) {
	h.setPolicy(store.PolicyChange{Target: "mid", Weight: ptr(3)})
	h.backlog(200, "mid")
	for _, joiner := range []string{"early", "zoo"} {
		require.Equal(t, map[string]int{"mid": 8}, h.saturate(8, 4), "mid alone has ready work")
		h.clock.Advance(time.Second)
		h.backlog(30, joiner)
		got := h.saturate(40, 4)
		requireShares(t, got, map[string]int{"mid": 3, joiner: 1}, joiner, " joins")
		// The joiner's other steps go, so that mid is alone again.
		for {
			c, err := h.s.ClaimSteps(h.ctx, store.ClaimParams{EngineID: "e1", Limit: 10, Namespaces: []string{joiner}, Now: h.clock.Now()})
			require.NoError(t, err)
			if len(c) == 0 {
				break
			}
			for _, s := range c {
				h.ok(s, `{}`)
			}
		}
	}
}
