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

// breakerTests are the conformance tests of the circuit breakers of steps.
var breakerTests = []struct {
	name string
	fn   func(t *testing.T, h *harness)
}{
	{"BreakerOpensAfterConsecutiveFailures", testBreakerOpens},
	{"BreakerSuccessResetsCount", testBreakerSuccessResets},
	{"BreakerThresholdBoundsClaims", testBreakerThresholdBoundsClaims},
	{"BreakerProbeAfterCooldown", testBreakerProbe},
	{"BreakerOneProbeUnderConcurrentClaims", testBreakerOneProbe},
	{"BreakerProbeLeaseLapsed", testBreakerProbeLapsed},
	{"BreakerProbeReleased", testBreakerProbeReleased},
	{"BreakerReset", testBreakerReset},
	{"BreakerPeek", testBreakerPeek},
	{"BreakerUnderFairShares", testBreakerFair},
	{"BreakerProbeDeferredByRate", testBreakerRate},
	{"BreakerValidation", testBreakerValidation},
}

const (
	testBreakerKey      = "ns/wf/call"
	testBreakerCooldown = 30 * time.Second
)

// insertBreakerTasks submits n one-step tasks whose step has a breaker
// opening after 3 failures, each with maxAttempts attempts.
func (h *harness) insertBreakerTasks(n, maxAttempts int) {
	h.t.Helper()
	in := make([]store.TaskInsert, n)
	for i := range in {
		in[i] = store.TaskInsert{Steps: []store.StepInsert{{Name: "call", Handler: "h", MaxAttempts: maxAttempts,
			Breaker: &store.BreakerSpec{Key: testBreakerKey, Failures: 3, Cooldown: testBreakerCooldown}}}}
	}
	h.insert(in...)
}

// fail records a failed attempt of c: a retry while attempts remain.
func (h *harness) fail(c store.ClaimedStep, retry bool) {
	h.t.Helper()
	o := store.Outcome{Fence: c.Fence, EngineID: c.EngineID, State: state.StepFailed, Error: "boom"}
	if retry {
		o.State, o.RunAt = state.StepWaiting, h.clock.Now()
	}
	require.NoError(h.t, h.complete(o)[0])
}

func (h *harness) breaker(key string) store.Breaker {
	h.t.Helper()
	bs, err := h.s.ListBreakers(h.ctx)
	require.NoError(h.t, err)
	for _, b := range bs {
		if b.Key == key {
			return b
		}
	}
	h.t.Fatalf("no breaker %s in %v", key, bs)
	return store.Breaker{}
}

// openBreaker fails three attempts of steps under the test breaker.
func (h *harness) openBreaker() {
	h.t.Helper()
	got := h.claim("e1", 3)
	require.Len(h.t, got, 3)
	for i, c := range got {
		h.fail(c, i%2 == 0) // a retry and a failure for good both count
	}
	require.Equal(h.t, store.BreakerOpen, h.breaker(testBreakerKey).State)
}

func testBreakerOpens(t *testing.T, h *harness) {
	h.insertBreakerTasks(6, 3)
	h.insert(store.TaskInsert{}) // a step without a breaker
	got := h.claim("e1", 2)
	require.Len(t, got, 2)
	h.fail(got[0], true)
	h.fail(got[1], true)
	b := h.breaker(testBreakerKey)
	require.Equal(t, store.BreakerClosed, b.State)
	require.Equal(t, 2, b.Failures)
	require.Equal(t, 3, b.Threshold)
	require.Equal(t, testBreakerCooldown, b.Cooldown)
	require.Nil(t, b.OpenedAt)

	third := h.claim("e1", 1)
	require.Len(t, third, 1)
	h.fail(third[0], false)
	b = h.breaker(testBreakerKey)
	require.Equal(t, store.BreakerOpen, b.State)
	require.Equal(t, 3, b.Failures)
	require.NotNil(t, b.OpenedAt)
	require.True(t, h.clock.Now().Equal(*b.OpenedAt))
	require.True(t, h.clock.Now().Add(testBreakerCooldown).Equal(*b.RetryAt))
	r, err := h.s.ListPolicies(h.ctx)
	require.NoError(t, err)
	require.Len(t, r.Breakers, 1)
	require.Equal(t, store.BreakerOpen, r.Breakers[0].State)

	// Held: only the step without a breaker is claimed; the held steps
	// stay ready with their attempts.
	attempts := func() (ready, used int) {
		tasks, err := h.s.ListTasks(h.ctx, store.TaskFilter{Limit: 100})
		require.NoError(t, err)
		for _, tk := range tasks {
			for _, s := range h.task(tk.ID).Steps {
				if s.Name == "call" && s.State == state.StepReady {
					ready++
					used += s.Attempts
				}
			}
		}
		return ready, used
	}
	ready, used := attempts()
	require.Equal(t, 5, ready, "six steps, one failed for good")
	got = h.claim("e2", 10)
	require.Len(t, got, 1)
	require.Equal(t, "only", got[0].Name, "the step without a breaker")
	h.clock.Advance(testBreakerCooldown - time.Second)
	require.Empty(t, h.claim("e2", 10), "held until the cooldown passes")
	ready2, used2 := attempts()
	require.Equal(t, ready, ready2, "held steps stay ready")
	require.Equal(t, used, used2, "and use no attempt")

	// The audit (and so the history) tells the breaker opened, on the
	// step whose failure opened it.
	require.Equal(t, []string{"breaker.opened"}, h.breakerEvents(third[0].TaskID))
}

// breakerEvents returns the event types of the breaker transitions in the
// audit of tasks (all tasks when none is given), in order.
func (h *harness) breakerEvents(tasks ...int64) []string {
	h.t.Helper()
	if len(tasks) == 0 {
		all, err := h.s.ListTasks(h.ctx, store.TaskFilter{Limit: 1000})
		require.NoError(h.t, err)
		for _, tk := range all {
			tasks = append(tasks, tk.ID)
		}
	}
	var entries []store.AuditEntry
	for _, id := range tasks {
		trail, err := h.s.Audit(h.ctx, id)
		require.NoError(h.t, err)
		for _, e := range trail {
			if strings.HasPrefix(e.To, store.BreakerAuditPrefix) {
				entries = append(entries, e)
			}
		}
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].ID < entries[j].ID })
	var out []string
	for _, e := range entries {
		out = append(out, store.EventType(e.Step, e.From, e.To))
	}
	return out
}

func testBreakerSuccessResets(t *testing.T, h *harness) {
	h.insertBreakerTasks(6, 1)
	got := h.claim("e1", 5)
	require.Len(t, got, 5)
	h.fail(got[0], false)
	h.fail(got[1], false)
	h.ok(got[2], `{}`)
	require.Equal(t, 0, h.breaker(testBreakerKey).Failures, "a success resets the count")
	h.fail(got[3], false)
	h.fail(got[4], false)
	b := h.breaker(testBreakerKey)
	require.Equal(t, store.BreakerClosed, b.State, "two consecutive failures are not three")
	require.Equal(t, 2, b.Failures)
	require.Len(t, h.claim("e1", 5), 1)
}

// testBreakerThresholdBoundsClaims: once a closed breaker counted a
// failure, a claim takes a step under it only while the failures counted
// plus the steps under it still running stay below the threshold (3 here),
// so no more than the threshold fail before it opens; a success lifts the
// bound.
func testBreakerThresholdBoundsClaims(t *testing.T, h *harness) {
	h.insertBreakerTasks(12, 1)
	first := h.claim("e1", 1)
	require.Len(t, first, 1)
	h.fail(first[0], false)
	require.Equal(t, 1, h.breaker(testBreakerKey).Failures)

	two := h.claim("e1", 10)
	require.Len(t, two, 2, "1 failure counted: room for 2 more")
	require.Empty(t, h.claim("e2", 10), "1 failure and 2 running: no room")
	h.fail(two[0], false)
	require.Empty(t, h.claim("e2", 10), "2 failures and 1 running: no room")
	h.ok(two[1], `{}`)
	require.Zero(t, h.breaker(testBreakerKey).Failures)
	free := h.claim("e1", 5)
	require.Len(t, free, 5, "a success resets the count: claims are not bounded")

	// Failures now: the first counted bounds claims to the room left, and
	// the breaker opens at exactly its threshold.
	for _, c := range free {
		h.fail(c, false)
	}
	b := h.breaker(testBreakerKey)
	require.Equal(t, store.BreakerOpen, b.State)
	require.Equal(t, 5, b.Failures, "the steps running when the first failure counted count too")
	require.Empty(t, h.claim("e1", 10), "open")
}

func testBreakerProbe(t *testing.T, h *harness) {
	h.insertBreakerTasks(6, 3)
	h.openBreaker()
	h.clock.Advance(testBreakerCooldown)
	probe := h.claim("e1", 10)
	require.Len(t, probe, 1, "after the cooldown, one probe")
	b := h.breaker(testBreakerKey)
	require.Equal(t, store.BreakerHalfOpen, b.State)
	require.Equal(t, probe[0].Fence.StepID, b.ProbeStepID)
	require.Empty(t, h.claim("e2", 10), "nothing else while the probe runs")
	// The probe's task: the breaker turns half-open, then the step is
	// claimed as its probe, in that order.
	trail, err := h.s.Audit(h.ctx, probe[0].TaskID)
	require.NoError(t, err)
	halfOpen, claimed := -1, -1
	for i, e := range trail {
		switch {
		case e.To == store.BreakerAuditPrefix+store.BreakerHalfOpen:
			halfOpen = i
		case e.Step == probe[0].Name && e.To == string(state.StepRunning) && e.Attempt == probe[0].Attempts:
			claimed = i
		}
	}
	require.True(t, halfOpen >= 0 && claimed > halfOpen, "half-open at %d, claimed at %d: %v", halfOpen, claimed, trail)

	// The probe fails: open again, for a fresh cooldown.
	h.fail(probe[0], true)
	b = h.breaker(testBreakerKey)
	require.Equal(t, store.BreakerOpen, b.State)
	require.True(t, h.clock.Now().Equal(*b.OpenedAt), "a fresh cooldown")
	h.clock.Advance(testBreakerCooldown - time.Millisecond)
	require.Empty(t, h.claim("e1", 10))
	h.clock.Advance(time.Millisecond)

	// The next probe succeeds: closed, and the held steps flow again.
	probe = h.claim("e1", 10)
	require.Len(t, probe, 1)
	h.ok(probe[0], `{}`)
	b = h.breaker(testBreakerKey)
	require.Equal(t, store.BreakerClosed, b.State)
	require.Zero(t, b.Failures)
	require.Nil(t, b.RetryAt)
	require.Len(t, h.claim("e1", 10), 4, "the held steps and the retries")

	require.Equal(t, []string{"breaker.opened", "breaker.probing", "breaker.opened", "breaker.probing", "breaker.closed"}, h.breakerEvents())
}

// testBreakerOneProbe claims from many goroutines once the cooldown has
// passed: exactly one probe.
func testBreakerOneProbe(t *testing.T, h *harness) {
	h.insertBreakerTasks(20, 1)
	h.openBreaker()
	h.clock.Advance(testBreakerCooldown)
	var mu sync.Mutex
	var all []store.ClaimedStep
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 4 {
				got, err := h.s.ClaimSteps(h.ctx, store.ClaimParams{EngineID: fmt.Sprintf("e%d", g), Limit: 3, Now: h.clock.Now()})
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
	require.Len(t, all, 1, "exactly one probe")
	require.Equal(t, all[0].Fence.StepID, h.breaker(testBreakerKey).ProbeStepID)
}

// testBreakerProbeLapsed: a probe whose engine dies gives its place back
// when the reaper returns it (an engine's death is not the step's failure):
// the breaker is open with its cooldown passed and the next claim probes,
// so it is never stuck half-open. Lapsed attempts do not count.
func testBreakerProbeLapsed(t *testing.T, h *harness) {
	h.register("e1")
	h.register("dead")
	h.insertBreakerTasks(6, 3)
	h.openBreaker()
	h.clock.Advance(testBreakerCooldown)
	probe := h.claim("dead", 10)
	require.Len(t, probe, 1)
	require.Equal(t, store.BreakerHalfOpen, h.breaker(testBreakerKey).State)
	n, err := h.s.Reap(h.ctx, h.clock.Now(), time.Time{}, []string{"dead"}, "e1")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	b := h.breaker(testBreakerKey)
	require.Equal(t, store.BreakerOpen, b.State, "the probe gave its place back")
	require.Zero(t, b.ProbeStepID)
	require.Equal(t, 3, b.Failures, "a lapsed lease is not a failure of the step")
	again := h.claim("e1", 10)
	require.Len(t, again, 1, "the next claim probes at once")
	require.Equal(t, store.BreakerHalfOpen, h.breaker(testBreakerKey).State)

	// Steps of a closed breaker whose engine dies do not count either.
	h.ok(again[0], `{}`)
	h.register("dead2")
	got := h.claim("dead2", 10)
	require.NotEmpty(t, got)
	n, err = h.s.Reap(h.ctx, h.clock.Now(), time.Time{}, []string{"dead2"}, "e1")
	require.NoError(t, err)
	require.Equal(t, len(got), n)
	b = h.breaker(testBreakerKey)
	require.Equal(t, store.BreakerClosed, b.State)
	require.Zero(t, b.Failures)
}

// testBreakerProbeReleased: a probe that gives its claim back (released, or
// its task cancelled) does not hold the breaker half-open.
func testBreakerProbeReleased(t *testing.T, h *harness) {
	h.register("e1")
	h.insertBreakerTasks(6, 3)
	h.openBreaker()
	h.clock.Advance(testBreakerCooldown)
	probe := h.claim("e1", 10)
	require.Len(t, probe, 1)
	n, err := h.s.ReleaseLease(h.ctx, "e1", probe[0].Fence.LeaseID)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, store.BreakerOpen, h.breaker(testBreakerKey).State)
	again := h.claim("e1", 10)
	require.Len(t, again, 1, "the next claim probes at once")

	// A probe whose task is cancelled ends without an outcome: another
	// probe may be claimed one cooldown after it was.
	_, err = h.s.CancelTask(h.ctx, again[0].TaskID, "e1", "test")
	require.NoError(t, err)
	require.Equal(t, store.BreakerHalfOpen, h.breaker(testBreakerKey).State)
	require.Empty(t, h.claim("e1", 10))
	h.clock.Advance(testBreakerCooldown)
	require.Len(t, h.claim("e1", 10), 1)
}

func testBreakerReset(t *testing.T, h *harness) {
	h.insertBreakerTasks(6, 3)
	h.openBreaker()
	_, err := h.s.ResetBreaker(h.ctx, store.BreakerReset{Key: testBreakerKey})
	require.ErrorIs(t, err, store.ErrInvalid, "the actor is required")
	_, err = h.s.ResetBreaker(h.ctx, store.BreakerReset{Key: "ns/wf/other", Actor: "cli:alice"})
	require.ErrorIs(t, err, store.ErrNotFound)
	b, err := h.s.ResetBreaker(h.ctx, store.BreakerReset{Key: testBreakerKey, Actor: "cli:alice", Reason: "fixed upstream"})
	require.NoError(t, err)
	require.Equal(t, store.BreakerClosed, b.State)
	require.Len(t, h.claim("e1", 10), 5, "the held steps and the retries flow again")
	bs, err := h.s.ListBreakers(h.ctx)
	require.NoError(t, err)
	require.Empty(t, bs, "a reset breaker is forgotten until it fails again")
	changes, err := h.s.PolicyChanges(h.ctx, 0)
	require.NoError(t, err)
	require.Len(t, changes, 1)
	require.Equal(t, "cli:alice", changes[0].Actor)
	require.Equal(t, testBreakerKey, changes[0].Target)
	require.Equal(t, "breaker reset (was open)", changes[0].Change)
	require.Equal(t, "fixed upstream", changes[0].Reason)
}

func testBreakerValidation(t *testing.T, h *harness) {
	for _, tt := range []struct {
		name string
		b    store.BreakerSpec
		want string
	}{
		{"no key", store.BreakerSpec{Failures: 1, Cooldown: time.Second}, "key"},
		{"no failures", store.BreakerSpec{Key: "k", Cooldown: time.Second}, "failures"},
		{"no cooldown", store.BreakerSpec{Key: "k", Failures: 1}, "cooldown"},
		{"long cooldown", store.BreakerSpec{Key: "k", Failures: 1, Cooldown: 8 * 24 * time.Hour}, "cooldown"},
	} {
		b := tt.b
		_, err := h.s.InsertTasks(h.ctx, []store.TaskInsert{{Namespace: "ns", Workflow: "wf", Version: "1",
			Steps: []store.StepInsert{{Name: "s", Handler: "h", Breaker: &b}}}})
		require.ErrorIs(t, err, store.ErrInvalidInsert, tt.name)
		require.ErrorContains(t, err, tt.want, tt.name)
	}
	for _, key := range []string{"", "ns/wf", "ns//s", "a/b/c/d"} {
		_, err := h.s.ResetBreaker(h.ctx, store.BreakerReset{Key: key, Actor: "a"})
		require.ErrorIs(t, err, store.ErrInvalid, key)
	}
}

// testBreakerPeek: the peek of preemption sees what the claim would take:
// nothing of an open breaker, and after its cooldown a step, without
// taking the probe.
func testBreakerPeek(t *testing.T, h *harness) {
	h.insertBreakerTasks(6, 3)
	h.openBreaker()
	p := store.ClaimParams{EngineID: "e1", Limit: 1}
	got, err := h.s.PeekClaim(h.ctx, p)
	require.NoError(t, err)
	require.Nil(t, got, "held by the open breaker")
	h.clock.Advance(testBreakerCooldown)
	got, err = h.s.PeekClaim(h.ctx, p)
	require.NoError(t, err)
	require.NotNil(t, got, "a probe may be claimed")
	require.Equal(t, store.BreakerOpen, h.breaker(testBreakerKey).State, "the peek took no probe")
	require.Len(t, h.claim("e1", 10), 1)
}

// testBreakerFair: with namespace weights the claim runs its fair query;
// an open breaker holds its steps there too, and one probe follows the
// cooldown.
func testBreakerFair(t *testing.T, h *harness) {
	h.insertBreakerTasks(6, 3)
	h.openBreaker()
	h.insert(store.TaskInsert{Namespace: "other"}, store.TaskInsert{Namespace: "other"})
	h.setPolicy(store.PolicyChange{Target: "ns", Weight: ptr(3)})
	h.setPolicy(store.PolicyChange{Target: "other", Weight: ptr(1)})
	got := h.claim("e1", 10)
	require.Equal(t, map[string]int{"other/wf": 2}, claimedWorkflows(got), "the breaker's steps are held")
	h.clock.Advance(testBreakerCooldown)
	got = h.claim("e1", 10)
	require.Len(t, got, 1, "one probe")
	require.Equal(t, store.BreakerHalfOpen, h.breaker(testBreakerKey).State)
}

// testBreakerRate: a probe whose rate limit has no token is deferred, and
// gives its place back: the breaker does not stay half-open.
func testBreakerRate(t *testing.T, h *harness) {
	in := make([]store.TaskInsert, 6)
	for i := range in {
		in[i] = store.TaskInsert{Steps: []store.StepInsert{{Name: "call", Handler: "h", MaxAttempts: 3,
			RateKey: "step:ns/wf/call", Rate: store.Rate{Limit: 3, Per: time.Hour},
			Breaker: &store.BreakerSpec{Key: testBreakerKey, Failures: 3, Cooldown: testBreakerCooldown}}}}
	}
	h.insert(in...)
	h.openBreaker() // takes the three tokens
	h.clock.Advance(testBreakerCooldown)
	require.Empty(t, h.claim("e1", 10), "no token for the probe")
	b := h.breaker(testBreakerKey)
	require.Equal(t, store.BreakerOpen, b.State, "the deferred probe gave its place back")
	require.Zero(t, b.ProbeStepID)
}
