package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/internal/pgtesting"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/store/postgres"
)

// TestLimitBoundsSeeEveryWayToRunning: a handle that bounds what runs in
// a namespace from its last count (limitbounds.go) sees what another
// handle claimed since and the tasks an operator's retry put back to
// running, so a workflow limit holds: of 20, after another handle's claims
// and ten retries, the last claim starts only the 7 tasks there is room
// for. Without either addition to the totals the bound would let it start
// 10.
func TestLimitBoundsSeeEveryWayToRunning(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := twoHandles(t)

	insert := func(n int) {
		tasks := make([]store.TaskInsert, n)
		for i := range tasks {
			tasks[i] = store.TaskInsert{Namespace: "ns", Workflow: "wf", Version: "1", LimitKey: "workflow:ns/wf", Limit: 20,
				Steps: []store.StepInsert{{Name: "s", Handler: "h", MaxAttempts: 1}}}
		}
		_, err := a.InsertTasks(ctx, tasks)
		require.NoError(t, err)
	}
	claim := func(s postgres.Store, engine string, n int) []store.ClaimedStep {
		got, err := s.ClaimSteps(ctx, store.ClaimParams{EngineID: engine, Limit: n})
		require.NoError(t, err)
		return got
	}
	running := func() int {
		var n int
		require.NoError(t, a.DB().QueryRowContext(ctx, `SELECT count(*) FROM tasks WHERE state = 'running' AND limit_key != ''`).Scan(&n))
		return n
	}

	insert(10)
	failed := claim(b, "b", 10)
	require.Len(t, failed, 10)
	var outs []store.Outcome
	for _, c := range failed {
		outs = append(outs, store.Outcome{Fence: c.Fence, EngineID: "b", State: state.StepFailed, Error: "boom"})
	}
	errs, err := b.CompleteSteps(ctx, outs)
	require.NoError(t, err)
	for _, e := range errs {
		require.NoError(t, e)
	}
	require.Zero(t, running(), "the ten tasks failed")
	insert(30)

	require.Len(t, claim(a, "a", 1), 1, "counted: nothing runs")
	require.Len(t, claim(b, "b", 2), 2, "another handle's claim")
	for _, c := range failed {
		require.NoError(t, a.RetryTask(ctx, c.TaskID, "", "test: retry"))
	}
	require.Equal(t, 13, running())

	claim(a, "a", 10)
	require.Equal(t, 20, running(), "the limit, not 23")
}

// TestLimitBoundsEndWithThePolicies: steps claimed without the
// namespace's lock while the namespace had no limit of its own are in no
// total, so a bound made before a namespace limit was set is not used
// after: the claim counts, and the new limit of 12 holds.
func TestLimitBoundsEndWithThePolicies(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := twoHandles(t)
	insert := func(n int, limited bool) {
		tasks := make([]store.TaskInsert, n)
		for i := range tasks {
			st := store.StepInsert{Name: "s", Handler: "h", MaxAttempts: 1}
			if limited {
				st.LimitKey, st.Limit = "step:ns/wf/s", 1000
			}
			tasks[i] = store.TaskInsert{Namespace: "ns", Workflow: "wf", Version: "1", Steps: []store.StepInsert{st}}
		}
		_, err := a.InsertTasks(ctx, tasks)
		require.NoError(t, err)
	}
	claim := func(s postgres.Store, engine string, n int) int {
		got, err := s.ClaimSteps(ctx, store.ClaimParams{EngineID: engine, Limit: n})
		require.NoError(t, err)
		return len(got)
	}
	running := func() int {
		var n int
		require.NoError(t, a.DB().QueryRowContext(ctx, `SELECT count(*) FROM steps WHERE state = 'running'`).Scan(&n))
		return n
	}
	insert(1, true)
	require.Equal(t, 1, claim(a, "a", 10), "counted, under a step limit of 1000")
	insert(10, false)
	require.Equal(t, 10, claim(b, "b", 10), "no limit: claimed without the lock")
	_, err := a.SetPolicy(ctx, store.PolicyChange{Target: "ns", Concurrency: ptr(12), Actor: "test"})
	require.NoError(t, err)
	insert(20, true)
	claim(a, "a", 10)
	require.Equal(t, 12, running(), "the namespace limit, not 21")
}

// TestBoundedClaimMeetsALowerLimit: a claim that bounds a namespace
// from its last count in its claim statement (gateBoundsShut) may do so
// only under limits at least as high as those the count was made for. A
// step limit of 3 that the last claim did not meet, below the namespace's
// limit of 100, is counted on its own: 3 of the 10 steps under it run.
// Claimed under the bound, all 10 would.
func TestBoundedClaimMeetsALowerLimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := handles(t, 1)[0]
	_, err := s.SetPolicy(ctx, store.PolicyChange{Target: "ns", Concurrency: ptr(100), Actor: "test"})
	require.NoError(t, err)
	insert := func(n int, key string, limit int) {
		tasks := make([]store.TaskInsert, n)
		for i := range tasks {
			tasks[i] = store.TaskInsert{Namespace: "ns", Workflow: "wf", Version: "1",
				Steps: []store.StepInsert{{Name: "s", Handler: "h", MaxAttempts: 1, LimitKey: key, Limit: limit}}}
		}
		_, err := s.InsertTasks(ctx, tasks)
		require.NoError(t, err)
	}
	claim := func(n int) int {
		got, err := s.ClaimSteps(ctx, store.ClaimParams{EngineID: "e", Limit: n})
		require.NoError(t, err)
		return len(got)
	}
	insert(4, "", 0)
	require.Equal(t, 2, claim(2), "counted")
	require.Equal(t, 2, claim(2), "bounded")
	insert(10, "step:ns/wf/s", 3)
	require.Equal(t, 3, claim(10))
	var n int
	require.NoError(t, s.DB().QueryRowContext(ctx, `SELECT count(*) FROM steps WHERE state = 'running' AND limit_key != ''`).Scan(&n))
	require.Equal(t, 3, n, "the step limit")
}

// twoHandles opens two store handles on one new schema, as two engines
// would have.
func twoHandles(t *testing.T) (a, b postgres.Store) {
	t.Helper()
	hs := handles(t, 2)
	return hs[0], hs[1]
}

// TestBoundedLimitsHoldUnderConcurrentClaims: three handles claim and
// complete steps under a namespace limit of 24 at once, each bounding
// from its own anchors while it can and counting when it must; what runs
// never passes the limit, as a fourth connection sees it between claims.
func TestBoundedLimitsHoldUnderConcurrentClaims(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const limit, claimers, rounds = 24, 3, 60
	hs := handles(t, claimers)
	_, err := hs[0].SetPolicy(ctx, store.PolicyChange{Target: "ns", Concurrency: ptr(limit), Actor: "test"})
	require.NoError(t, err)
	tasks := make([]store.TaskInsert, claimers*rounds*8)
	for i := range tasks {
		tasks[i] = store.TaskInsert{Namespace: "ns", Workflow: "wf", Version: "1", Steps: []store.StepInsert{{Name: "s", Handler: "h", MaxAttempts: 1}}}
	}
	_, err = hs[0].InsertTasks(ctx, tasks)
	require.NoError(t, err)
	running := func() int {
		var n int
		require.NoError(t, hs[0].DB().QueryRowContext(ctx, `SELECT count(*) FROM steps WHERE state = 'running'`).Scan(&n))
		return n
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var most atomic.Int64
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			select {
			case <-stop:
				return
			default:
			}
			var n int64
			if err := hs[0].DB().QueryRowContext(ctx, `SELECT count(*) FROM steps WHERE state = 'running'`).Scan(&n); err != nil {
				t.Errorf("count running steps: %v", err)
				return
			}
			if n > most.Load() {
				most.Store(n)
			}
		}
	}()
	claimed := make([]int, claimers)
	for i, s := range hs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			engine := fmt.Sprintf("e%d", i)
			var mine []store.ClaimedStep
			for r := range rounds {
				got, err := s.ClaimSteps(ctx, store.ClaimParams{EngineID: engine, Limit: 1 + (r+i)%8})
				if err != nil {
					t.Errorf("claim: %v", err)
					return
				}
				claimed[i] += len(got)
				mine = append(mine, got...)
				// The older half of this handle's steps complete.
				done := mine[:len(mine)/2]
				mine = mine[len(mine)/2:]
				var outs []store.Outcome
				for _, c := range done {
					outs = append(outs, store.Outcome{Fence: c.Fence, EngineID: engine, State: state.StepCompleted, Result: []byte(`{}`)})
				}
				if _, err := s.CompleteSteps(ctx, outs); err != nil {
					t.Errorf("complete: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-watched
	require.LessOrEqual(t, most.Load(), int64(limit), "what ran at most")
	require.LessOrEqual(t, running(), limit)
	for i, n := range claimed {
		require.Positive(t, n, "claimer %d claimed nothing", i)
	}
}

// handles opens n store handles on one new schema, as n engines would
// have.
func handles(t *testing.T, n int) []postgres.Store {
	t.Helper()
	schema := pgtesting.SchemaName("bounds")
	out := make([]postgres.Store, n)
	for i := range out {
		s, err := postgres.Open(context.Background(), pgtesting.URL(t), postgres.Options{Schema: schema, MaxConns: 4})
		require.NoError(t, err)
		t.Cleanup(func() { s.Close() })
		out[i] = s
	}
	t.Cleanup(func() { _, _ = out[0].DB().ExecContext(context.Background(), `DROP SCHEMA `+schema+` CASCADE`) })
	return out
}

// TestLimitRowsTakenInNamespaceOrder: a claim takes the rows of
// limit_claims in the namespaces' order, whether it counts or bounds, so
// that no two claims wait for each other's rows. Once a claim statement
// added to the totals of "b", a namespace named before it that the claim
// meets later ("a") waits for the next claim; one named after it ("c")
// is claimed at once.
func TestLimitRowsTakenInNamespaceOrder(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		other      string
		firstClaim int
	}{
		{"a", 1}, // b's one place; a waits
		{"c", 4}, // b's one place and three of c
	} {
		t.Run(tc.other, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := handles(t, 1)[0]
			for ns, limit := range map[string]int{"b": 1, tc.other: 100} {
				_, err := s.SetPolicy(ctx, store.PolicyChange{Target: ns, Concurrency: ptr(limit), Actor: "test"})
				require.NoError(t, err)
			}
			insert := func(ns string) {
				tasks := make([]store.TaskInsert, 5)
				for i := range tasks {
					tasks[i] = store.TaskInsert{Namespace: ns, Workflow: "wf", Version: "1", Steps: []store.StepInsert{{Name: "s", Handler: "h", MaxAttempts: 1}}}
				}
				_, err := s.InsertTasks(ctx, tasks)
				require.NoError(t, err)
			}
			insert("b") // older: the first round's candidates
			insert(tc.other)
			claim := func() map[string]int {
				got, err := s.ClaimSteps(ctx, store.ClaimParams{EngineID: "e", Limit: 4})
				require.NoError(t, err)
				by := map[string]int{}
				for _, c := range got {
					by[c.Namespace]++
				}
				return by
			}
			first := claim()
			require.Equal(t, 1, first["b"], "b's limit")
			require.Equal(t, tc.firstClaim, first["b"]+first[tc.other])
			second := claim()
			require.Equal(t, 0, second["b"], "b is full")
			require.Equal(t, min(4, 5-first[tc.other]), second[tc.other])
		})
	}
}
