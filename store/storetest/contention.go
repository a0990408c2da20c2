package storetest

import (
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// Contention: writes that run at the same time on the same rows. None may
// fail other than with store.ErrContended (the store tried again and gave
// up: "retry later"), and the counts each call returns are what that call
// changed, so that concurrent calls' counts add up to what happened.

var contentionTests = []struct {
	name string
	fn   func(t *testing.T, h *harness)
}{
	{"ConcurrentSupersede", testConcurrentSupersede},
	{"DeleteBesideRetry", testDeleteBesideRetry},
	{"ConcurrentBulkRetries", testConcurrentBulkRetries},
	{"TaskReadAgreesWhileItMoves", testTaskReadAgrees},
}

// faults gathers, from many goroutines, the errors other than
// store.ErrContended and the calls that gave up with it.
type faults struct {
	mu     sync.Mutex
	errs   []error
	gaveUp int
}

// failed records err and reports whether the call failed.
func (f *faults) failed(err error) bool {
	if err == nil {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if errors.Is(err, store.ErrContended) {
		f.gaveUp++
	} else {
		f.errs = append(f.errs, err)
	}
	return true
}

// check fails the test on any error other than store.ErrContended, and,
// unless contention is allowed, on that too.
func (f *faults) check(t *testing.T, allowContended bool) {
	t.Helper()
	require.Empty(t, f.errs, "the only error contention may give is store.ErrContended")
	if !allowContended {
		require.Zero(t, f.gaveUp, "calls that gave up on contention")
	}
}

// failedTasks inserts n one-step tasks and fails each for good.
func (h *harness) failedTasks(n int) []int64 {
	h.t.Helper()
	if _, err := h.s.GetEngine(h.ctx, "e1"); errors.Is(err, store.ErrNotFound) {
		h.register("e1")
	}
	in := make([]store.TaskInsert, n)
	for i := range in {
		in[i] = store.TaskInsert{Namespace: "contended", Steps: []store.StepInsert{{Name: "only", Handler: "h", MaxAttempts: 1}}}
	}
	ids := make([]int64, n)
	for i, r := range h.insert(in...) {
		ids[i] = r.Task.ID
	}
	claimed := h.claimWith(store.ClaimParams{EngineID: "e1", Limit: n, Namespaces: []string{"contended"}})
	require.Len(h.t, claimed, n)
	outcomes := make([]store.Outcome, n)
	for i, c := range claimed {
		outcomes[i] = store.Outcome{Fence: c.Fence, EngineID: "e1", State: state.StepFailed, Error: "boom"}
	}
	for _, err := range h.complete(outcomes...) {
		require.NoError(h.t, err)
	}
	return ids
}

// newestFirst splits ids into batches of size, newest first, as a bulk
// action walks them.
func newestFirst(ids []int64, size int) [][]int64 {
	desc := slices.Clone(ids)
	slices.Sort(desc)
	slices.Reverse(desc)
	return slices.Collect(slices.Chunk(desc, size))
}

// retriedOnce checks that each task's audit trail moved it from failed to
// running exactly once, and returns how many of ids are running.
func (h *harness) retriedOnce(ids []int64) int {
	h.t.Helper()
	running := 0
	for _, id := range ids {
		trail, err := h.s.Audit(h.ctx, id)
		require.NoError(h.t, err)
		moves := 0
		for _, e := range trail {
			if e.Step == "" && e.From == string(state.TaskFailed) && e.To == string(state.TaskRunning) {
				moves++
			}
		}
		task, err := h.s.GetTask(h.ctx, id)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		require.NoError(h.t, err)
		if task.State == state.TaskRunning {
			running++
			require.Equal(h.t, 1, moves, "task %d was retried once", id)
		} else {
			require.Zero(h.t, moves, "task %d", id)
		}
	}
	return running
}

// testConcurrentSupersede: many submissions at once that each take the
// same key from whichever task holds it, beside an engine claiming the
// steps of the tasks they cancel: no error, and in the end one task holds
// the key and every other was cancelled by the one after it.
func testConcurrentSupersede(t *testing.T, h *harness) {
	h.register("e1")
	first := h.insert(store.TaskInsert{IdempotencyKey: "cart", Steps: chain("a", "b")})[0].Task.ID
	const writers, each = 10, 5
	var (
		mu         sync.Mutex
		created    = []int64{first}
		duplicates int
		f, claims  faults
		wg         sync.WaitGroup
		stop       = make(chan struct{})
	)
	for range writers {
		wg.Go(func() {
			for range each {
				res, err := h.s.InsertTasks(h.ctx, []store.TaskInsert{{Namespace: "ns", Workflow: "wf", Version: "1",
					IdempotencyKey: "cart", Supersede: true, Steps: chain("a", "b")}})
				if f.failed(err) {
					continue
				}
				mu.Lock()
				if res[0].Duplicate {
					duplicates++
				}
				created = append(created, res[0].Task.ID)
				mu.Unlock()
			}
		})
	}
	claimer := make(chan struct{})
	go func() {
		defer close(claimer)
		for {
			select {
			case <-stop:
				return
			default:
			}
			_, err := h.s.ClaimSteps(h.ctx, store.ClaimParams{EngineID: "e1", Limit: 4, Now: h.clock.Now(), LeaseID: store.NewLeaseID()})
			claims.failed(err)
		}
	}()
	wg.Wait()
	close(stop)
	<-claimer
	f.check(t, false)
	claims.check(t, true)
	require.Zero(t, duplicates, "a supersede never returns the task holding the key")
	require.Len(t, created, 1+writers*each)
	holders := 0
	for _, id := range created {
		task := h.task(id)
		if task.IdempotencyKey == "cart" {
			holders++
			require.NotEqual(t, state.TaskCancelled, task.State)
			continue
		}
		require.Equal(t, state.TaskCancelled, task.State, "task %d gave up its key", id)
	}
	require.Equal(t, 1, holders, "one task holds the key")
}

// testDeleteBesideRetry: a bulk delete and a bulk retry of the same failed
// tasks at once, the retry walking them newest first (as bulk actions by
// filter do) and the delete oldest first, so that the delete reaches the
// batch the retry works on: no deadlock comes out, and every task was
// either retried or deleted, as the two calls' counts say.
func testDeleteBesideRetry(t *testing.T, h *harness) {
	// A few rounds: the two meet in one batch at some moment or other.
	for range 3 {
		const n, batch = 1000, 500
		ids := h.failedTasks(n)
		var retried, deleted, seenRetry, seenDelete int
		var f faults
		var wg sync.WaitGroup
		wg.Go(func() {
			for _, b := range newestFirst(ids, batch) {
				res, err := h.s.RetryTasks(h.ctx, b, "api:ops", "")
				if !f.failed(err) {
					retried += len(res.Done)
					seenRetry += len(res.Done) + res.Skipped
				}
			}
		})
		wg.Go(func() {
			for b := range slices.Chunk(ids, batch) {
				res, err := h.s.DeleteTasks(h.ctx, store.DeleteParams{IDs: b, Actor: "api:ops", Reason: "cleanup"})
				if !f.failed(err) {
					deleted += len(res.Done)
					seenDelete += len(res.Done) + res.Skipped
				}
			}
		})
		wg.Wait()
		f.check(t, false)
		require.Equal(t, n, seenRetry, "each retry counts each of its tasks as done or skipped")
		require.Equal(t, n, seenDelete, "each delete counts each of its tasks as done or skipped")
		require.Equal(t, n, retried+deleted, "each task retried or deleted")
		require.Equal(t, retried, h.retriedOnce(ids))
		// What was retried is running again: fail it for the next round.
		claimed := h.claimWith(store.ClaimParams{EngineID: "e1", Limit: n, Namespaces: []string{"contended"}})
		require.Len(t, claimed, retried)
		for _, c := range claimed {
			require.NoError(t, h.complete(store.Outcome{Fence: c.Fence, EngineID: "e1", State: state.StepFailed, Error: "boom"})[0])
		}
		_, err := h.s.DeleteTasks(h.ctx, store.DeleteParams{IDs: ids, Actor: "api:ops"})
		require.NoError(t, err)
	}
}

// testConcurrentBulkRetries: three bulk retries of the same failed tasks at
// once: their counts add up to the tasks, each retried once.
func testConcurrentBulkRetries(t *testing.T, h *harness) {
	const n, batch = 300, 50
	ids := h.failedTasks(n)
	done := make([]int, 3)
	var f faults
	var wg sync.WaitGroup
	for i := range done {
		wg.Go(func() {
			for _, b := range newestFirst(ids, batch) {
				res, err := h.s.RetryTasks(h.ctx, b, "api:ops", "")
				if !f.failed(err) {
					done[i] += len(res.Done)
				}
			}
		})
	}
	wg.Wait()
	f.check(t, false)
	require.Equal(t, n, done[0]+done[1]+done[2], "the counts add up: %v", done)
	require.Equal(t, n, h.retriedOnce(ids))
}

// testTaskReadAgrees: GetTask, and ListTasks with the active steps, read a
// task and its steps in one snapshot, so the task they return agrees with
// its steps while claims and outcomes move them: never pending with a step
// that began, never ended with one still running.
func testTaskReadAgrees(t *testing.T, h *harness) {
	const tasks = 40
	for range tasks {
		id := h.insert(store.TaskInsert{Namespace: "agree", Steps: chain("a", "b")})[0].Task.ID
		moved := make(chan struct{})
		go func() {
			defer close(moved)
			for _, name := range []string{"a", "b"} {
				got, err := h.s.ClaimSteps(h.ctx, store.ClaimParams{EngineID: "e1", Limit: 1, TaskID: id, Now: h.clock.Now()})
				if err != nil || len(got) != 1 || got[0].Name != name {
					t.Errorf("claim %s of task %d: %v %v", name, id, names(got), err)
					return
				}
				if _, err := h.s.CompleteSteps(h.ctx, []store.Outcome{{Fence: got[0].Fence, EngineID: "e1", State: state.StepCompleted}}); err != nil {
					t.Errorf("complete %s of task %d: %v", name, id, err)
					return
				}
			}
		}()
		for done := false; !done; {
			select {
			case <-moved:
				done = true
			default:
			}
			task, err := h.s.GetTask(h.ctx, id)
			require.NoError(t, err)
			listed, err := h.s.ListTasks(h.ctx, store.TaskFilter{IDs: []int64{id}, Active: true})
			require.NoError(t, err)
			require.Len(t, listed, 1)
			for _, read := range []struct {
				how   string
				state state.Task
				steps []store.Step
			}{{"GetTask", task.State, task.Steps}, {"ListTasks", listed[0].State, listed[0].Active}} {
				for _, s := range read.steps {
					began := s.State != state.StepPending && s.State != state.StepReady
					require.False(t, read.state == state.TaskPending && began, "%s: task %d pending with step %s %s", read.how, id, s.Name, s.State)
					require.False(t, read.state.Terminal() && s.State == state.StepRunning, "%s: task %d %s with step %s running", read.how, id, read.state, s.Name)
				}
			}
		}
	}
}
