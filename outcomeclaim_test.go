package weft_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/workflow"
)

// TestChildrenClaimedWithTheirParentsOutcome: the steps of a chain after
// its first are claimed in the transaction that records their parent's
// outcome, not by the claim loop, and each sees its parent's result.
// (While the claim loop holds the slots, as it does for a moment after
// each claim, an outcome leaves the children to it: on a loaded machine
// that moment can stretch, so the test runs chains until one is claimed
// so from end to end.)
func TestChildrenClaimedWithTheirParentsOutcome(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		s := &claimCounter{Store: open(t)}
		e := newEngine(t, s, weft.Config{Concurrency: 4, PollInterval: time.Hour})
		e.Handle("h", func(_ context.Context, a *weft.Attempt) (any, error) {
			n := 0
			for _, d := range a.Deps {
				if err := json.Unmarshal(d, &n); err != nil {
					return nil, err
				}
			}
			return n + 1, nil
		})
		register(t, e, workflow.New("ns", "chain", "1").Step("a", "h").
			Step("b", "h", workflow.DependsOn("a")).Step("c", "h", workflow.DependsOn("b")).Step("d", "h", workflow.DependsOn("c")))
		start(t, e)
		for attempt := 0; ; attempt++ {
			require.Less(t, attempt, 20, "no chain had its children claimed with their parents' outcomes")
			claimed, withOutcomes, withSubmission := s.claimed.Load(), s.withOutcomes.Load(), s.withSubmission.Load()
			id := submit(t, e, weft.Submission{Workflow: "ns/chain"}).Task.ID
			task := wait(t, e, id)
			require.Equal(t, state.TaskCompleted, task.State)
			require.JSONEq(t, `4`, string(stepByName(t, task, "d").Result))
			byOutcomes := s.withOutcomes.Load() - withOutcomes
			require.Equal(t, int64(4), s.claimed.Load()-claimed+byOutcomes+s.withSubmission.Load()-withSubmission, "each step claimed once")
			if byOutcomes == 3 { // b, c and d; a by the claim loop or its submission
				return
			}
		}
	})
}

// TestSubmissionClaimsItsFirstSteps: an engine that runs submits a task
// and claims its first steps in the same transaction. (While the claim
// loop holds the slots, as it does for a moment after each claim, the
// submission leaves the steps to it: the test submits until one claims.)
func TestSubmissionClaimsItsFirstSteps(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		s := &claimCounter{Store: open(t)}
		e := newEngine(t, s, weft.Config{Concurrency: 4, PollInterval: time.Hour})
		e.Handle("h", func(context.Context, *weft.Attempt) (any, error) { return nil, nil })
		register(t, e, workflow.New("ns", "fan", "1").Step("a", "h").Step("b", "h").Step("join", "h", workflow.DependsOn("a", "b")))
		start(t, e)
		// The claim loop's first claim reads the policies.
		eventually(t, "the first claim", func() bool { return s.claims.Load() > 0 })
		for attempt := 0; s.withSubmission.Load() == 0; attempt++ {
			require.Less(t, attempt, 20, "no submission claimed its first steps")
			id := submit(t, e, weft.Submission{Workflow: "ns/fan"}).Task.ID
			require.Equal(t, state.TaskCompleted, wait(t, e, id).State)
		}
		require.Equal(t, int64(2), s.withSubmission.Load(), "a and b, in one submission")
	})
}

// TestFailedClaimWithOutcomesFallsBack: when the write that records a
// batch and claims fails, the engine releases the claim's lease and writes
// the batch as usual; a release the store refuses is not tried again (the
// completer would otherwise wait on it until Stop).
func TestFailedClaimWithOutcomesFallsBack(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		s := &failingClaims{claimCounter: claimCounter{Store: open(t)}}
		e := newEngine(t, s, weft.Config{Concurrency: 4, PollInterval: time.Hour})
		e.Handle("h", func(context.Context, *weft.Attempt) (any, error) { return nil, nil })
		register(t, e, workflow.New("ns", "chain", "1").Step("a", "h").Step("b", "h", workflow.DependsOn("a")))
		id := submit(t, e, weft.Submission{Workflow: "ns/chain"}).Task.ID
		start(t, e)
		require.Equal(t, state.TaskCompleted, wait(t, e, id).State)
		require.Positive(t, s.releases.Load())
		require.Equal(t, int64(0), s.withOutcomes.Load())
		require.Equal(t, int64(2), s.claimed.Load(), "the claim loop claimed both")
	})
}

// TestStopWhileALostClaimCannotBeReleased: Stop ends at its deadline even
// while the completer is still trying to release a claim whose reply was
// lost, the database answering nothing.
func TestStopWhileALostClaimCannotBeReleased(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		s := &failingClaims{claimCounter: claimCounter{Store: open(t)}, unreachable: true}
		e := newEngine(t, s, weft.Config{Concurrency: 4, PollInterval: time.Hour})
		e.Handle("h", func(context.Context, *weft.Attempt) (any, error) { return nil, nil })
		register(t, e, workflow.New("ns", "chain", "1").Step("a", "h").Step("b", "h", workflow.DependsOn("a")))
		submit(t, e, weft.Submission{Workflow: "ns/chain"})
		start(t, e)
		eventually(t, "a release tried", func() bool { return s.releases.Load() > 0 })
		stopped := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			stopped <- e.Stop(ctx)
		}()
		select {
		case <-stopped:
		case <-time.After(time.Minute):
			t.Fatal("Stop did not return")
		}
	})
}

// failingClaims fails every write that records outcomes and claims (a
// connection lost) and every release of a lease: refused, or, while
// unreachable, lost too.
type failingClaims struct {
	claimCounter
	unreachable bool
	releases    atomic.Int64
}

func (f *failingClaims) CompleteAndClaim(context.Context, []store.Outcome, store.ClaimParams) ([]error, []store.ClaimedStep, error) {
	return nil, nil, errors.New("connection lost")
}

func (f *failingClaims) ReleaseLease(context.Context, string, int64) (int, error) {
	f.releases.Add(1)
	if f.unreachable {
		return 0, errors.New("connection lost")
	}
	return 0, store.Refused(errors.New("refused"))
}

// claimCounter counts the steps a store's claims return.
type claimCounter struct {
	store.Store
	claims                                atomic.Int64 // ClaimSteps calls
	claimed, withOutcomes, withSubmission atomic.Int64 // steps
}

func (c *claimCounter) ClaimSteps(ctx context.Context, p store.ClaimParams) ([]store.ClaimedStep, error) {
	got, err := c.Store.ClaimSteps(ctx, p)
	c.claims.Add(1)
	c.claimed.Add(int64(len(got)))
	return got, err
}

func (c *claimCounter) InsertAndClaim(ctx context.Context, tasks []store.TaskInsert, p store.ClaimParams) ([]store.InsertResult, []store.ClaimedStep, error) {
	res, got, err := c.Store.(store.SubmitClaimer).InsertAndClaim(ctx, tasks, p)
	c.withSubmission.Add(int64(len(got)))
	return res, got, err
}

func (c *claimCounter) CompleteAndClaim(ctx context.Context, outcomes []store.Outcome, p store.ClaimParams) ([]error, []store.ClaimedStep, error) {
	results, got, err := c.Store.(store.OutcomeClaimer).CompleteAndClaim(ctx, outcomes, p)
	c.withOutcomes.Add(int64(len(got)))
	return results, got, err
}
