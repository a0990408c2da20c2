package weft_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/workflow"
)

// remoteWorker drives Engine.Workers as a remote worker would.
type remoteWorker struct {
	t  *testing.T
	w  *weft.Workers
	id string
}

func newRemoteWorker(t *testing.T, e *weft.Engine) *remoteWorker {
	t.Helper()
	w := e.Workers()
	id, err := w.Register(context.Background(), "test", "test-owner")
	require.NoError(t, err)
	return &remoteWorker{t: t, w: w, id: id}
}

// claim claims up to max steps of the handlers, waiting briefly for one.
func (r *remoteWorker) claim(max int, handlers ...string) []weft.RemoteStep {
	r.t.Helper()
	steps, err := r.w.Claim(context.Background(), r.id, "test-owner", weft.WorkerClaim{Handlers: handlers, Max: max, Wait: 2 * time.Second})
	require.NoError(r.t, err)
	return steps
}

// one claims exactly one step of the handler.
func (r *remoteWorker) one(handler string) weft.RemoteStep {
	r.t.Helper()
	steps := r.claim(1, handler)
	require.Len(r.t, steps, 1, "claim one %s step", handler)
	return steps[0]
}

func (r *remoteWorker) complete(s weft.RemoteStep, result string) weft.Recorded {
	r.t.Helper()
	o, err := r.w.Complete(context.Background(), r.id, "test-owner", s.Fence, json.RawMessage(result))
	require.NoError(r.t, err)
	return o
}

// A remote worker's steps go through the engine's own lifecycle: a
// decision's result decides, a batch makes its items from its template
// (with the template's config and retry policy), and a failure is settled
// under the step's policy.
func TestRemoteStepsFollowTheDefinition(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		ctx := context.Background()
		e := newEngine(t, open(t), weft.Config{})
		register(t, e, workflow.New("test", "remote", "1").
			Template("item", "work", workflow.WithConfig(map[string]int{"size": 3}), workflow.WithRetry(workflow.RetryPolicy{MaxAttempts: 1})).
			Step("pick", "choose", workflow.AsDecision()).
			Step("left", "work", workflow.DependsOn("pick")).
			Step("right", "work", workflow.DependsOn("pick")).
			Step("split", "split", workflow.AsBatch("item"), workflow.DependsOn("left")))
		start(t, e)
		rw := newRemoteWorker(t, e)
		id := submit(t, e, weft.Submission{Workflow: "test/remote"}).Task.ID

		pick := rw.one("choose")
		_, err := rw.w.Complete(ctx, rw.id, "test-owner", pick.Fence, json.RawMessage(`{"branches": ["split"]}`))
		require.NoError(t, err, "a decision that picks no direct child is recorded as a failure, not refused")
		task := wait(t, e, id)
		require.Equal(t, state.TaskFailed, task.State)
		require.Contains(t, stepByName(t, task, "pick").Error, "not one of its direct children")

		id = submit(t, e, weft.Submission{Workflow: "test/remote"}).Task.ID
		o := rw.complete(rw.one("choose"), `{"branches": ["left"]}`)
		require.Equal(t, state.StepCompleted, o.State)
		left := rw.one("work")
		require.Equal(t, "left", left.Name, "right was not chosen")
		rw.complete(left, `1`)
		rw.complete(rw.one("split"), `{"batches": ["a", "b"]}`)
		items := rw.claim(2, "work")
		require.Len(t, items, 2)
		require.JSONEq(t, `{"size": 3}`, string(items[0].Config), "an item runs its template")
		rw.complete(items[0], `"ok"`)
		o, err = rw.w.Fail(ctx, rw.id, "test-owner", items[1].Fence, weft.Failure{Message: "boom"})
		require.NoError(t, err)
		require.Equal(t, state.StepFailed, o.State, "the template allows one attempt")
		task = wait(t, e, id)
		require.Equal(t, state.TaskFailed, task.State)
		require.Equal(t, state.StepSkipped, stepByName(t, task, "right").State)
	})
}

// Failures of remote steps follow the retry policy as a handler's errors
// do; progress and checkpoints are saved for the step the worker holds, and
// a later attempt sees the checkpoint; reports with a stale fence are
// refused.
func TestRemoteRetryProgressCheckpoint(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		ctx := context.Background()
		e := newEngine(t, open(t), weft.Config{})
		register(t, e, workflow.New("test", "retry", "1").
			Step("work", "work", workflow.WithRetry(workflow.RetryPolicy{MaxAttempts: 3, Backoff: "fixed", Initial: workflow.Duration(time.Millisecond)})))
		start(t, e)
		rw := newRemoteWorker(t, e)
		id := submit(t, e, weft.Submission{Workflow: "test/retry"}).Task.ID

		first := rw.one("work")
		require.Equal(t, 1, first.Attempts)
		require.NoError(t, rw.w.Progress(ctx, rw.id, "test-owner", first.Fence, 0.5, "half way"))
		require.NoError(t, rw.w.Checkpoint(ctx, rw.id, "test-owner", first.Fence, json.RawMessage(`{"done": 5}`)))
		require.ErrorIs(t, rw.w.Progress(ctx, rw.id, "test-owner", first.Fence, 1.5, ""), weft.ErrInvalid)
		task, err := e.Get(ctx, id)
		require.NoError(t, err)
		st := stepByName(t, task, "work")
		require.NotNil(t, st.Progress)
		require.InDelta(t, 0.5, *st.Progress, 1e-9)
		require.Equal(t, "half way", st.ProgressMessage)

		o, err := rw.w.Fail(ctx, rw.id, "test-owner", first.Fence, weft.Failure{Message: "flaky"})
		require.NoError(t, err)
		require.Equal(t, state.StepWaiting, o.State, "the policy allows three attempts")
		_, err = rw.w.Complete(ctx, rw.id, "test-owner", first.Fence, nil)
		require.ErrorIs(t, err, weft.ErrStaleLease, "the attempt was already reported")

		second := rw.one("work")
		require.Equal(t, 2, second.Attempts)
		require.JSONEq(t, `{"done": 5}`, string(second.Checkpoint), "a later attempt starts from the checkpoint")
		o, err = rw.w.Fail(ctx, rw.id, "test-owner", second.Fence, weft.Failure{Message: "bad input", Permanent: true})
		require.NoError(t, err)
		require.Equal(t, state.StepFailed, o.State, "a permanent failure is not retried")
		require.Equal(t, state.TaskFailed, wait(t, e, id).State)
	})
}

// Remote claims go through the engine's claim path: namespace caps hold
// for them, and a step whose condition is false is skipped, never handed
// out.
func TestRemoteClaimsHonourPolicies(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		e := newEngine(t, open(t), weft.Config{})
		register(t, e, workflow.New("capped", "one", "1").Step("work", "work"))
		one := 1
		_, err := e.SetLimits(t.Context(), "capped", weft.Limits{Concurrency: &one}, weft.Operator{})
		require.NoError(t, err)
		register(t, e, workflow.New("test", "cond", "1").
			Step("maybe", "work", workflow.When("input.go == true")).
			Step("after", "work", workflow.DependsOn("maybe"), workflow.WithTriggerRule(workflow.AllDone)))
		start(t, e)
		rw := newRemoteWorker(t, e)

		submit(t, e, weft.Submission{Workflow: "capped/one"})
		submit(t, e, weft.Submission{Workflow: "capped/one"})
		got := rw.claim(5, "work")
		require.Len(t, got, 1, "the namespace cap allows one running step")
		rw.complete(got[0], `null`)
		require.Len(t, rw.claim(5, "work"), 1, "the next one once the first finished")

		id := submit(t, e, weft.Submission{Workflow: "test/cond", Input: map[string]bool{"go": false}}).Task.ID
		after := rw.one("work")
		require.Equal(t, "after", after.Name, "maybe was skipped by its condition without reaching the worker")
		rw.complete(after, `null`)
		task := wait(t, e, id)
		require.Equal(t, state.StepSkipped, stepByName(t, task, "maybe").State)
	})
}

// A worker id that was never registered, the engine's own id and another
// owner's worker are all unknown to a caller: no call can use or stop them.
func TestRemoteUnknownWorker(t *testing.T) {
	t.Parallel()
	s := backends()["sqlite"](t)
	e := newEngine(t, s, weft.Config{})
	start(t, e)
	ctx := context.Background()
	w := e.Workers()
	theirs, err := w.Register(ctx, "theirs", "owner-b")
	require.NoError(t, err)
	for _, id := range []string{"remote-nobody", e.ID(), theirs} {
		_, err := w.Claim(ctx, id, "owner-a", weft.WorkerClaim{Handlers: []string{"work"}, Max: 1})
		require.ErrorIs(t, err, weft.ErrNotFound, id)
		_, err = w.Heartbeat(ctx, id, "owner-a", nil)
		require.ErrorIs(t, err, weft.ErrNotFound, id)
		require.ErrorIs(t, w.Stop(ctx, id, "owner-a"), weft.ErrNotFound, id)
	}
	live, err := s.ListEngines(ctx)
	require.NoError(t, err)
	ids := make([]string, len(live))
	for i, l := range live {
		ids[i] = l.ID
	}
	require.Contains(t, ids, e.ID(), "the engine's own id cannot be stopped through the worker API")
	require.Contains(t, ids, theirs, "nor another owner's worker")
	_, err = w.Heartbeat(ctx, theirs, "owner-b", nil)
	require.NoError(t, err, "its owner still uses it")
}

// A remote step honours its timeout as a local one does: the worker is
// told its deadline, and a worker that does not report by then loses the
// attempt, failed as "step timed out" under the step's retry policy; the
// worker learns it at its next heartbeat and its late report is refused.
func TestRemoteStepTimesOut(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		ctx := context.Background()
		e := newEngine(t, open(t), weft.Config{})
		register(t, e, workflow.New("test", "slow", "1").
			Step("work", "work", workflow.WithTimeout(200*time.Millisecond),
				workflow.WithRetry(workflow.RetryPolicy{MaxAttempts: 2, Backoff: "fixed", Initial: workflow.Duration(time.Millisecond)})))
		start(t, e)
		rw := newRemoteWorker(t, e)
		id := submit(t, e, weft.Submission{Workflow: "test/slow"}).Task.ID

		before := time.Now()
		first := rw.one("work")
		after := time.Now()
		require.Equal(t, 200*time.Millisecond, first.Timeout)
		// The deadline is the claim's time and the timeout, and the claim
		// came between before and after (microseconds, as stored).
		require.False(t, first.Deadline.Before(before.Add(200*time.Millisecond-time.Millisecond)), "deadline %v, claimed after %v", first.Deadline, before)
		require.False(t, first.Deadline.After(after.Add(200*time.Millisecond+time.Millisecond)), "deadline %v, claimed before %v", first.Deadline, after)
		// The worker ignores its deadline but keeps heartbeating, listing
		// the step; the engine takes the attempt back and the heartbeat
		// says so.
		eventually(t, "the heartbeat to report the timed-out step lost", func() bool {
			lost, err := rw.w.Heartbeat(ctx, rw.id, "test-owner", []weft.Fence{first.Fence})
			require.NoError(t, err)
			return len(lost) == 1 && lost[0] == first.Fence
		})
		_, err := rw.w.Complete(ctx, rw.id, "test-owner", first.Fence, json.RawMessage(`"late"`))
		require.ErrorIs(t, err, weft.ErrStaleLease)

		second := rw.one("work")
		require.Equal(t, 2, second.Attempts)
		rw.complete(second, `"in time"`)
		task := wait(t, e, id)
		require.Equal(t, state.TaskCompleted, task.State)
		trail, err := e.Audit(ctx, id)
		require.NoError(t, err)
		var timedOut bool
		for _, a := range trail {
			timedOut = timedOut || strings.Contains(a.Reason, "step timed out after 200ms")
		}
		require.True(t, timedOut, "the audit trail says the first attempt timed out: %+v", trail)
	})
}

// A worker that deregisters gives its steps back at once: another worker
// claims them without waiting for the leader's next reap.
func TestRemoteStopReclaimsAtOnce(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		ctx := context.Background()
		// A lease and reap interval far longer than the test: only the
		// stop itself can give the step back in time.
		e := newEngine(t, open(t), weft.Config{LeaseTTL: time.Hour, HeartbeatInterval: time.Minute})
		register(t, e, workflow.New("test", "stop", "1").Step("work", "work"))
		start(t, e)
		first := newRemoteWorker(t, e)
		id := submit(t, e, weft.Submission{Workflow: "test/stop"}).Task.ID
		held := first.one("work")
		require.NoError(t, first.w.Stop(ctx, first.id, "test-owner"))

		second := newRemoteWorker(t, e)
		again := second.one("work")
		require.Equal(t, held.ID, again.ID)
		second.complete(again, `"done"`)
		require.Equal(t, state.TaskCompleted, wait(t, e, id).State)
	})
}

// A heartbeat that leaves out a step its worker claimed less than two
// heartbeat intervals ago keeps it: the claim's reply may still be on its
// way, and a heartbeat that crosses it must not run the step again. A
// step left out for longer is released with its attempt given back.
func TestRemoteHeartbeatKeepsAYoungClaim(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		ctx := context.Background()
		const interval = 300 * time.Millisecond
		e := newEngine(t, open(t), weft.Config{LeaseTTL: time.Minute, HeartbeatInterval: interval})
		register(t, e, workflow.New("test", "young", "1").Step("work", "work"))
		start(t, e)
		rw := newRemoteWorker(t, e)
		id := submit(t, e, weft.Submission{Workflow: "test/young"}).Task.ID
		before := time.Now()
		held := rw.one("work")
		claimed := time.Now()

		// More than one interval after the claim, less than two: the
		// heartbeat that does not list the step yet must not release it.
		<-time.After(time.Until(claimed.Add(interval + interval/4)))
		_, err := rw.w.Heartbeat(ctx, rw.id, "test-owner", nil)
		require.NoError(t, err)
		if time.Since(before) < 2*interval {
			lost, err := rw.w.Heartbeat(ctx, rw.id, "test-owner", []weft.Fence{held.Fence})
			require.NoError(t, err)
			require.Empty(t, lost, "a heartbeat released a claim younger than two heartbeat intervals")
		} else {
			t.Logf("the heartbeat came %s after the claim: too late to check the young claim", time.Since(before))
		}

		// Left out past two intervals, it is released: another claim gets
		// it with the same attempt, and the first holder's fence is lost.
		<-time.After(time.Until(claimed.Add(2*interval + interval/4)))
		_, err = rw.w.Heartbeat(ctx, rw.id, "test-owner", nil)
		require.NoError(t, err)
		again := rw.one("work")
		require.Equal(t, held.ID, again.ID)
		require.Equal(t, held.Attempts, again.Attempts, "the released claim gave its attempt back")
		_, err = rw.w.Complete(ctx, rw.id, "test-owner", held.Fence, json.RawMessage(`"late"`))
		require.ErrorIs(t, err, weft.ErrStaleLease)
		rw.complete(again, `"done"`)
		require.Equal(t, state.TaskCompleted, wait(t, e, id).State)
	})
}
