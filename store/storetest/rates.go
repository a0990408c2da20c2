package storetest

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// rateTests are the conformance tests of rate limits: token buckets held
// in the database, taken by the claim, and steps that find no token
// deferred to when one will exist without using an attempt.
var rateTests = []struct {
	name string
	fn   func(t *testing.T, h *harness)
}{
	{"RateChangesAreValidated", testRateValidation},
	{"StepRateBurstThenDefers", testStepRate},
	{"KeyedRatesAreIndependent", testKeyedRates},
	{"NamespaceRate", testNamespaceRate},
	{"RateHoldsUnderConcurrentClaims", testRateConcurrent},
	{"RateRunsOutAfterAGrantedClaim", testRateRunsOut},
	{"RateDeferralsLeaveTheirSlots", testRateDeferralSlots},
	{"RateTokensReservedAhead", testRateReserved},
	{"ReservedTokensNeverExceedTheLimit", testRateReservedExact},
	{"ReservedTokensLapseWithTheirRate", testRateReservedRateChange},
	{"ReservedTokensHoldUnderConcurrentClaims", testRateReservedConcurrent},
	{"ReservedTokensUsedAreReleased", testRateReservedReleased},
	{"ClaimsOfReservedTokensStayWithinTheRate", testRateReservedBacklog},
	{"AStepOfABucketNotReservedWaitsForItsToken", testRateReservedOther},
}

// rated is a one-step task under a step rate.
func rated(key string, r store.Rate) store.TaskInsert {
	return store.TaskInsert{Steps: []store.StepInsert{{Name: "call", Handler: "h", MaxAttempts: 1, RateKey: key, Rate: r}}}
}

// promote makes the steps whose run_at came ready, at the harness clock.
func (h *harness) promote() int {
	h.t.Helper()
	n, err := h.s.Promote(h.ctx, h.clock.Now(), "")
	require.NoError(h.t, err)
	return n
}

// waitingRunAts returns the run_at of the waiting steps of tasks, sorted,
// as offsets from start, and checks that none used an attempt.
func (h *harness) waitingRunAts(start time.Time, res []store.InsertResult) []time.Duration {
	h.t.Helper()
	var out []time.Duration
	for _, r := range res {
		for _, st := range h.task(r.Task.ID).Steps {
			if st.State != state.StepWaiting {
				continue
			}
			require.Zero(h.t, st.Attempts, "a deferral uses no attempt")
			require.NotNil(h.t, st.RunAt)
			out = append(out, st.RunAt.Sub(start))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func testRateValidation(t *testing.T, h *harness) {
	for _, tt := range []struct {
		name string
		c    store.PolicyChange
		want string
	}{
		{"rate on workflow", store.PolicyChange{Target: "shop/checkout", Rate: &store.Rate{Limit: 5, Per: time.Second}, Actor: "a"}, "set on a namespace"},
		{"rate on all", store.PolicyChange{Target: store.TargetAll, Rate: &store.Rate{Limit: 5, Per: time.Second}, Actor: "a"}, "set on a namespace"},
		{"no period", store.PolicyChange{Target: "shop", Rate: &store.Rate{Limit: 5}, Actor: "a"}, "period"},
		{"negative", store.PolicyChange{Target: "shop", Rate: &store.Rate{Limit: -1, Per: time.Second}, Actor: "a"}, "limit"},
		{"too long", store.PolicyChange{Target: "shop", Rate: &store.Rate{Limit: 1, Per: 48 * time.Hour}, Actor: "a"}, "period"},
	} {
		_, err := h.s.SetPolicy(h.ctx, tt.c)
		require.ErrorIs(t, err, store.ErrInvalid, tt.name)
		require.ErrorContains(t, err, tt.want, tt.name)
	}
	_, err := h.s.InsertTasks(h.ctx, []store.TaskInsert{{Namespace: "ns", Workflow: "wf", Version: "1",
		Steps: []store.StepInsert{{Name: "x", Handler: "h", RateKey: "k"}}}})
	require.ErrorIs(t, err, store.ErrInvalidInsert, "a rate key needs a rate")
}

func testStepRate(t *testing.T, h *harness) {
	r := store.Rate{Limit: 2, Per: time.Second}
	var res []store.InsertResult
	for range 5 {
		res = append(res, h.insert(rated("step:ns/wf/call", r))...)
	}
	other := h.insert(store.TaskInsert{})
	start := h.clock.Now()
	var deferred []store.RateDeferral
	got := h.claimWith(store.ClaimParams{EngineID: "e1", Limit: 10, Deferred: func(d []store.RateDeferral) { deferred = append(deferred, d...) }})
	require.Len(t, got, 3, "a burst of the limit, and the step under no rate")
	require.Equal(t, []time.Duration{500 * time.Millisecond, time.Second, 1500 * time.Millisecond}, h.waitingRunAts(start, res),
		"the rest deferred one token interval apart, from when the next token exists")
	require.Len(t, deferred, 1)
	require.Equal(t, store.RateDeferral{Key: "step:ns/wf/call", Steps: 3}, store.RateDeferral{Key: deferred[0].Key, Steps: deferred[0].Steps})
	require.True(t, deferred[0].Until.Equal(start.Add(1500*time.Millisecond)), deferred[0].Until)
	require.Equal(t, state.StepRunning, h.task(other[0].Task.ID).Steps[0].State)
	audit, err := h.s.Audit(h.ctx, res[4].Task.ID)
	require.NoError(t, err)
	last := audit[len(audit)-1]
	require.Equal(t, [2]string{"ready", "waiting"}, [2]string{last.From, last.To})
	require.Contains(t, last.Reason, "rate limit step:ns/wf/call: no token until")

	require.Empty(t, h.claim("e1", 10), "deferred steps are not ready")
	h.clock.Advance(499 * time.Millisecond)
	require.Zero(t, h.promote())
	h.clock.Advance(time.Millisecond)
	require.Equal(t, 1, h.promote())
	require.Len(t, h.claim("e1", 10), 1, "one token came")

	// All the time for the rest: the bucket refills up to its limit only.
	h.clock.Advance(10 * time.Second)
	require.Equal(t, 2, h.promote())
	more := append(h.insert(rated("step:ns/wf/call", r), rated("step:ns/wf/call", r)), res...)
	require.Len(t, h.claim("e1", 10), 2, "the bucket holds at most the limit")
	require.Len(t, h.waitingRunAts(h.clock.Now(), more), 2)
	for _, st := range h.task(res[0].Task.ID).Steps {
		require.LessOrEqual(t, st.Attempts, 1)
	}

	r2, err := h.s.ListPolicies(h.ctx)
	require.NoError(t, err)
	require.Len(t, r2.Rates, 1)
	require.Equal(t, "step:ns/wf/call", r2.Rates[0].Key)
	require.Equal(t, r, r2.Rates[0].Rate)
	require.NotNil(t, r2.Rates[0].DeferredUntil)
}

func testKeyedRates(t *testing.T, h *harness) {
	r := store.Rate{Limit: 1, Per: time.Minute}
	var alice, bob []store.InsertResult
	for range 3 {
		alice = append(alice, h.insert(rated("step:ns/wf/call=alice", r))...)
		bob = append(bob, h.insert(rated("step:ns/wf/call=bob", r))...)
	}
	start := h.clock.Now()
	require.Len(t, h.claim("e1", 10), 2, "one per key")
	require.Equal(t, []time.Duration{time.Minute, 2 * time.Minute}, h.waitingRunAts(start, alice))
	require.Equal(t, []time.Duration{time.Minute, 2 * time.Minute}, h.waitingRunAts(start, bob))
	h.insert(rated("step:ns/wf/call=carol", r))
	require.Len(t, h.claim("e1", 10), 1, "a new key has its own bucket")

	// Buckets full again, with no deferral to come, are forgotten.
	n, err := h.s.PruneRates(h.ctx, h.clock.Now())
	require.NoError(t, err)
	require.Zero(t, n, "every bucket is in use")
	h.clock.Advance(time.Minute)
	n, err = h.s.PruneRates(h.ctx, h.clock.Now())
	require.NoError(t, err)
	require.Equal(t, 1, n, "carol's is full and nobody waits for it")
	rep, err := h.s.ListPolicies(h.ctx)
	require.NoError(t, err)
	require.Len(t, rep.Rates, 2)
	h.clock.Advance(time.Minute)
	n, err = h.s.PruneRates(h.ctx, h.clock.Now())
	require.NoError(t, err)
	require.Equal(t, 2, n)
}

func testNamespaceRate(t *testing.T, h *harness) {
	for range 5 {
		h.insert(store.TaskInsert{Namespace: "shop"})
	}
	h.insert(store.TaskInsert{Namespace: "other"}, store.TaskInsert{Namespace: "other"})
	p := h.setPolicy(store.PolicyChange{Target: "shop", Rate: &store.Rate{Limit: 3, Per: time.Second}, Actor: "cli:alice"})
	require.Equal(t, &store.Rate{Limit: 3, Per: time.Second}, p.Rate)
	require.NotNil(t, p.Tokens)
	require.InDelta(t, 3.0, *p.Tokens, 1e-9, "a new bucket is full")
	require.Equal(t, map[string]int{"shop/wf": 3, "other/wf": 2}, claimedWorkflows(h.claim("e1", 10)))

	rep, err := h.s.ListPolicies(h.ctx)
	require.NoError(t, err)
	require.Len(t, rep.Policies, 1)
	require.Equal(t, "3/s", rep.Policies[0].Rate.String())
	require.InDelta(t, 0.0, *rep.Policies[0].Tokens, 1e-9)
	changes, err := h.s.PolicyChanges(h.ctx, 1)
	require.NoError(t, err)
	require.Equal(t, "rate=3/s", changes[0].Change)
	require.Equal(t, "cli:alice", changes[0].Actor)

	// Removing the rate: new work is claimed at once; deferred steps wait
	// for their run_at (they hold no token).
	p = h.setPolicy(store.PolicyChange{Target: "shop", Rate: &store.Rate{}})
	require.Nil(t, p.Rate)
	h.insert(store.TaskInsert{Namespace: "shop"}, store.TaskInsert{Namespace: "shop"})
	require.Len(t, h.claim("e1", 10), 2)
	rep, err = h.s.ListPolicies(h.ctx)
	require.NoError(t, err)
	require.Empty(t, rep.Policies, "a namespace with nothing set is forgotten")
	h.clock.Advance(time.Second)
	require.Equal(t, 2, h.promote())
	require.Len(t, h.claim("e1", 10), 2)

	// A step under both a step rate and its namespace's needs a token of
	// each; one held back by either takes none of the other.
	h.setPolicy(store.PolicyChange{Target: "shop", Rate: &store.Rate{Limit: 2, Per: time.Second}})
	h.clock.Advance(time.Minute)
	both := store.TaskInsert{Namespace: "shop", Steps: []store.StepInsert{{Name: "call", Handler: "h", MaxAttempts: 1, RateKey: "step:shop/wf/call", Rate: store.Rate{Limit: 1, Per: time.Second}}}}
	h.insert(both, both, store.TaskInsert{Namespace: "shop"})
	require.Len(t, h.claim("e1", 10), 2, "one step under both rates, one under the namespace's")
	rep, err = h.s.ListPolicies(h.ctx)
	require.NoError(t, err)
	require.InDelta(t, 0.0, *rep.Policies[0].Tokens, 1e-9)

	// A namespace token taken for a step its own rate held back is given
	// back in the same claim.
	h.setPolicy(store.PolicyChange{Target: "dual", Rate: &store.Rate{Limit: 2, Per: time.Second}})
	dual := store.TaskInsert{Namespace: "dual", Steps: []store.StepInsert{{Name: "call", Handler: "h", MaxAttempts: 1, RateKey: "step:dual/wf/call", Rate: store.Rate{Limit: 1, Per: time.Hour}}}}
	h.insert(dual, dual)
	require.Len(t, h.claim("e1", 10), 1)
	rep, err = h.s.ListPolicies(h.ctx)
	require.NoError(t, err)
	require.Equal(t, "dual", rep.Policies[0].Target)
	require.InDelta(t, 1.0, *rep.Policies[0].Tokens, 1e-9, "the held-back step's namespace token is back")
}

// testRateConcurrent claims from many goroutines at once, all at the same
// instant: a rate of 3 is never exceeded.
func testRateConcurrent(t *testing.T, h *harness) {
	r := store.Rate{Limit: 3, Per: time.Hour}
	for i := range 12 {
		h.insert(rated("step:ns/wf/call", r), store.TaskInsert{Namespace: fmt.Sprintf("limited%d", i%2)})
	}
	h.setPolicy(store.PolicyChange{Target: "limited0", Rate: &store.Rate{Limit: 2, Per: time.Hour}})
	h.setPolicy(store.PolicyChange{Target: "limited1", Rate: &store.Rate{Limit: 1, Per: time.Hour}})
	now := h.clock.Now()
	var mu sync.Mutex
	var all []store.ClaimedStep
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 4 {
				got, err := h.s.ClaimSteps(h.ctx, store.ClaimParams{EngineID: fmt.Sprintf("e%d", g), Limit: 2, Now: now})
				if err != nil && !errors.Is(err, store.ErrUnavailable) {
					t.Errorf("claim: %v", err)
					return
				}
				mu.Lock()
				all = append(all, got...)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	count := map[string]int{}
	for _, c := range all {
		count[strings.Join([]string{c.Namespace, c.Name}, "/")]++
	}
	require.Equal(t, map[string]int{"ns/call": 3, "limited0/only": 2, "limited1/only": 1}, count)
}

// testRateRunsOut: a claim after one that got every token it asked for
// (which PostgreSQL takes in its claim statement, claiming only if every
// bucket grants all) claims and defers exactly as the first would have,
// whether its buckets grant all, some or none, and with a namespace rate
// and a step rate on the same steps.
func testRateRunsOut(t *testing.T, h *harness) {
	r := store.Rate{Limit: 2, Per: time.Second}
	h.setPolicy(store.PolicyChange{Target: "ns", Rate: &store.Rate{Limit: 100, Per: time.Second}})
	start := h.clock.Now()
	h.insert(rated("step:ns/wf/call", r))
	require.Len(t, h.claim("e1", 10), 1, "granted")
	var res []store.InsertResult
	for range 5 {
		res = append(res, h.insert(rated("step:ns/wf/call", r))...)
	}
	other := h.insert(store.TaskInsert{})
	got := h.claim("e1", 10)
	require.Len(t, got, 2, "the last token, and the step under the namespace rate alone")
	require.Equal(t, []time.Duration{500 * time.Millisecond, time.Second, 1500 * time.Millisecond, 2 * time.Second}, h.waitingRunAts(start, res),
		"the rest deferred one token interval apart")
	require.Equal(t, state.StepRunning, h.task(other[0].Task.ID).Steps[0].State)
	p, err := h.s.ListPolicies(h.ctx)
	require.NoError(t, err)
	require.Len(t, p.Policies, 1)
	require.NotNil(t, p.Policies[0].Tokens)
	require.InDelta(t, 97, *p.Policies[0].Tokens, 0.01, "the namespace's tokens of the steps claimed, none of those deferred")

	h.clock.Advance(500 * time.Millisecond)
	require.Equal(t, 1, h.promote())
	require.Len(t, h.claim("e1", 10), 1, "one token came: granted")
	extra := h.insert(rated("step:ns/wf/call", r))
	require.Empty(t, h.claim("e1", 10), "no token left")
	require.Equal(t, []time.Duration{2500 * time.Millisecond}, h.waitingRunAts(start, extra),
		"queued one interval after the bucket's last deferral")
}

// testRateDeferralsLeaveTheirSlots: the slots of the steps a claim defers
// go to the ready steps behind them in the same claim, also after a claim
// that got every token it asked for.
func testRateDeferralSlots(t *testing.T, h *harness) {
	r := store.Rate{Limit: 3, Per: time.Second}
	h.insert(rated("step:ns/wf/call", r))
	require.Len(t, h.claim("e1", 1), 1, "granted: two tokens left")
	h.insert(rated("step:ns/wf/call", r), rated("step:ns/wf/call", r), rated("step:ns/wf/call", r))
	plain := h.insert(store.TaskInsert{}, store.TaskInsert{})
	got := h.claim("e1", 3)
	require.Len(t, got, 3, "two under the rate, and the first step behind the one deferred")
	require.Equal(t, plain[0].Task.ID, got[2].TaskID)
}

// nsTokens returns the tokens ListPolicies reports of namespace ns's rate.
func (h *harness) nsTokens(ns string) float64 {
	h.t.Helper()
	rep, err := h.s.ListPolicies(h.ctx)
	require.NoError(h.t, err)
	for _, p := range rep.Policies {
		if p.Target == ns && p.Tokens != nil {
			return *p.Tokens
		}
	}
	h.t.Fatalf("no rate reported for %s", ns)
	return 0
}

// testRateReserved: a claim under a rate of at least 1,000 a period,
// far from binding, reserves tokens ahead (a sixteenth of the limit, at
// most 64 per token it takes), and the handle's next claims take them
// without writing the bucket, until half the bucket's hold (the period)
// has passed; the bucket refills only up to its limit less what is held.
func testRateReserved(t *testing.T, h *harness) {
	h.setPolicy(store.PolicyChange{Target: "ns", Rate: &store.Rate{Limit: 1000, Per: time.Second}})
	steps := []struct {
		advance time.Duration
		tasks   int
		tokens  float64
		why     string
	}{
		{0, 1, 1000 - 1 - 62, "one token taken, 62 reserved"},
		{0, 5, 937, "taken from the reservation: the bucket is as it was"},
		{300 * time.Millisecond, 1, 938, "refilled up to the limit less the 62 held; still reserved"},
		{300 * time.Millisecond, 1, 938 - 1 - 62, "past the half second the handle uses them for: taken from the bucket, with a new reservation; the old one is held still"},
		{0, 5, 875, "taken from the new reservation"},
		{2 * time.Second, 0, 1000, "the holds lapsed: the bucket is full again"},
	}
	for _, st := range steps {
		h.clock.Advance(st.advance)
		if st.tasks > 0 {
			h.insert(make([]store.TaskInsert, st.tasks)...)
		}
		require.Len(t, h.claim("e1", 10), st.tasks, st.why)
		require.InDelta(t, st.tokens, h.nsTokens("ns"), 1e-9, st.why)
	}
}

// testRateReservedExact: the tokens a handle holds reserved and those the
// bucket holds never exceed the limit together: a claim that takes both
// claims what a bucket of the limit would have granted at that time.
func testRateReservedExact(t *testing.T, h *harness) {
	r := store.Rate{Limit: 1000, Per: time.Second}
	h.insert(rated("step:ns/wf/call", r))
	require.Len(t, h.claim("e1", 1), 1, "one token, and 62 reserved")
	h.clock.Advance(400 * time.Millisecond) // the bucket refilled past its limit less the reservation
	var many []store.TaskInsert
	for range 1100 {
		many = append(many, rated("step:ns/wf/call", r))
	}
	h.insert(many...)
	require.Equal(t, 1000, len(h.claim("e1", 1100)), "62 reserved and 938 from the bucket: a full bucket's worth")
	require.Empty(t, h.claim("e1", 1100), "the other 100 deferred")
}

// testRateReservedRateChange: tokens reserved under a rate are not used
// once the rate changes, and the bucket still counts them as held (its
// refill until a period after they lapse), so a lowered rate is not
// exceeded.
func testRateReservedRateChange(t *testing.T, h *harness) {
	h.setPolicy(store.PolicyChange{Target: "ns", Rate: &store.Rate{Limit: 1000, Per: time.Second}})
	h.insert(store.TaskInsert{})
	require.Len(t, h.claim("e1", 10), 1, "one token, and 62 reserved")
	h.setPolicy(store.PolicyChange{Target: "ns", Rate: &store.Rate{Limit: 10, Per: time.Second}})
	for range 30 {
		h.insert(store.TaskInsert{})
	}
	got := len(h.claim("e1", 30))
	require.LessOrEqual(t, got, 10, "the reservation lapsed with its rate")
	for range 2 {
		h.clock.Advance(time.Second)
		h.promote()
		got += len(h.claim("e1", 30))
	}
	require.LessOrEqual(t, got, 30, "at most 10 a second since the change, and 10 at once")
	require.Positive(t, got, "the hold ended with its time")
}

// testRateReservedConcurrent claims from many goroutines at once, all at
// the same instant, under a rate whose tokens are reserved ahead: the
// rate is never exceeded.
func testRateReservedConcurrent(t *testing.T, h *harness) {
	h.setPolicy(store.PolicyChange{Target: "ns", Rate: &store.Rate{Limit: 1000, Per: time.Hour}})
	many := make([]store.TaskInsert, 1200)
	h.insert(many...)
	now := h.clock.Now()
	var mu sync.Mutex
	total := 0
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 6 {
				got, err := h.s.ClaimSteps(h.ctx, store.ClaimParams{EngineID: fmt.Sprintf("e%d", g), Limit: 1 + 7*g, Now: now})
				if err != nil && !errors.Is(err, store.ErrUnavailable) {
					t.Errorf("claim: %v", err)
					return
				}
				mu.Lock()
				total += len(got)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	require.LessOrEqual(t, total, 1000)
	require.Positive(t, total)
	got := len(h.claim("e1", 1200))
	require.LessOrEqual(t, total+got, 1000, "what the claims left, reserved or not, adds up to the limit at most")
}

// testRateReservedReleased: a claim that writes a bucket again releases the
// reserved tokens its handle used since, so that the bucket refills past
// them; only the new reservation is held.
func testRateReservedReleased(t *testing.T, h *harness) {
	h.setPolicy(store.PolicyChange{Target: "ns", Rate: &store.Rate{Limit: 1000, Per: time.Second}})
	h.insert(store.TaskInsert{})
	require.Len(t, h.claim("e1", 100), 1, "one token, and 62 reserved")
	h.insert(make([]store.TaskInsert, 63)...)
	require.Len(t, h.claim("e1", 62), 62, "the 62 reserved")
	require.InDelta(t, 937, h.nsTokens("ns"), 1e-9)
	require.Len(t, h.claim("e1", 100), 1, "from the bucket, releasing the 62 used and reserving 62 more")
	require.InDelta(t, 937-1-62, h.nsTokens("ns"), 1e-9)
	h.clock.Advance(300 * time.Millisecond)
	require.InDelta(t, 1000-62, h.nsTokens("ns"), 1e-9, "refilled up to the limit less the 62 held, not 124")
}

// testRateReservedBacklog claims, claim after claim at one instant, from a
// backlog under a step's rate and a namespace's rate whose tokens the
// handle reserves ahead: neither rate is exceeded, and the tokens reserved
// are used, not lost.
func testRateReservedBacklog(t *testing.T, h *harness) {
	h.setPolicy(store.PolicyChange{Target: "ns", Rate: &store.Rate{Limit: 5000, Per: time.Hour}})
	r := store.Rate{Limit: 4000, Per: time.Hour}
	many := make([]store.TaskInsert, 4500)
	for i := range many {
		many[i] = rated("step:ns/wf/call", r)
	}
	h.insert(many...)
	total := h.claimAll("e1", 100)
	require.Equal(t, 4000, total, "the step's rate, all of its tokens")
	h.insert(make([]store.TaskInsert, 1500)...)
	total += h.claimAll("e1", 100)
	require.LessOrEqual(t, total, 5000, "the namespace's rate")
	require.GreaterOrEqual(t, total, 5000-312, "at most one reservation (a sixteenth) lost")
}

// claimAll claims limit steps at a time for engine until a claim takes
// none, and returns how many it took; it fails after 1,000 claims that
// all took some.
func (h *harness) claimAll(engine string, limit int) int {
	h.t.Helper()
	total := 0
	for range 1000 {
		got := len(h.claim(engine, limit))
		if got == 0 {
			return total
		}
		total += got
	}
	h.t.Fatalf("claims of %d for %s never ran dry: %d claimed", limit, engine, total)
	return total
}

// testRateReservedOther: while the handle holds tokens of one bucket, a
// step of another bucket, whose token is used up, is not claimed with the
// steps of the first but waits for its token.
func testRateReservedOther(t *testing.T, h *harness) {
	fast, slow := store.Rate{Limit: 100000, Per: time.Second}, store.Rate{Limit: 1, Per: time.Hour}
	h.insert(rated("step:ns/wf/fast", fast), rated("step:ns/wf/slow", slow))
	require.Len(t, h.claim("e1", 10), 2, "one token of each; the fast bucket reserves more")
	for range 3 {
		h.insert(rated("step:ns/wf/fast", fast), rated("step:ns/wf/fast", fast))
		require.Len(t, h.claim("e1", 10), 2, "from the fast bucket's reservation")
	}
	res := h.insert(rated("step:ns/wf/fast", fast), rated("step:ns/wf/slow", slow), rated("step:ns/wf/fast", fast))
	got := h.claim("e1", 10)
	require.Len(t, got, 2, "the slow bucket has no token")
	for _, c := range got {
		require.NotEqual(t, res[1].Task.ID, c.TaskID)
	}
	require.Equal(t, state.StepWaiting, h.task(res[1].Task.ID).Steps[0].State, "deferred to its token")
}
