package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// Submission in bulk: what one InsertTasks call of many tasks keeps,
// however the store writes them.

var submitTests = []struct {
	name string
	fn   func(t *testing.T, h *harness)
}{
	{"BulkSubmitMixedBatch", testBulkSubmitMixed},
	{"BulkSubmitWithoutKeys", testBulkSubmitWithoutKeys},
	{"BulkSubmitSupersedeInOrder", testBulkSubmitSupersede},
	{"BulkSubmitConcurrentKeys", testBulkSubmitConcurrentKeys},
	{"BulkSubmitNamesInvalidTask", testBulkSubmitInvalid},
	{"SubmitKeepsStepTextsAsGiven", testSubmitStepTexts},
}

// RunSubmit runs the conformance tests of submission in bulk alone, for a
// store whose InsertTasks takes another path than the one Run tests (a
// caller's transaction, say).
func RunSubmit(t *testing.T, open Opener) {
	for _, tt := range append(submitTests, supersedeTests...) {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			clock := NewClock()
			tt.fn(t, &harness{t: t, clock: clock, s: open(t, clock, 10*time.Second), ctx: context.Background()})
		})
	}
}

// diamond builds a -> (b, c) -> d.
func diamond() []store.StepInsert {
	return []store.StepInsert{
		{Name: "a", Handler: "h", MaxAttempts: 2, TTL: time.Minute},
		{Name: "b", Handler: "h", Deps: []int{0}, Priority: 3},
		{Name: "c", Handler: "h", Deps: []int{0}},
		{Name: "d", Handler: "h", Deps: []int{1, 2}},
	}
}

func testBulkSubmitMixed(t *testing.T, h *harness) {
	existing := h.insert(store.TaskInsert{IdempotencyKey: "held"})[0].Task
	auditBefore := h.auditCount(existing.ID)
	now := h.clock.Now()
	later, until := now.Add(time.Hour), now.Add(2*time.Hour)
	shared := diamond() // one workflow version's steps, shared by several tasks
	batch := []store.TaskInsert{
		0: {Priority: 1},
		1: {IdempotencyKey: "held"},
		2: {IdempotencyKey: "new", Steps: shared, Tags: map[string]string{"team": "billing", "tier": "gold"}},
		3: {RunAt: later, GoodUntil: until, Steps: shared},
		4: {IdempotencyKey: "new", Tags: map[string]string{"team": "other"}},
		5: {Namespace: "other", IdempotencyKey: "held"},
		6: {Steps: shared, Priority: 5},
		7: {IdempotencyKey: "held"},
	}
	// Enough steps that a store may write them another way than a few.
	for range 20 {
		batch = append(batch, store.TaskInsert{Steps: shared})
	}
	res := h.insert(batch...)
	require.Len(t, res, len(batch))

	// Duplicates return the task holding the key, in place.
	for _, i := range []int{1, 7} {
		require.True(t, res[i].Duplicate, "task %d", i)
		require.Equal(t, existing.ID, res[i].Task.ID, "task %d", i)
		require.Equal(t, "held", res[i].Task.IdempotencyKey)
	}
	require.True(t, res[4].Duplicate)
	require.Equal(t, res[2].Task.ID, res[4].Task.ID, "a key repeated within the call is one task")
	require.Equal(t, map[string]string{"team": "billing", "tier": "gold"}, res[4].Task.Tags, "the duplicate is the first task, with its tags")
	require.Equal(t, auditBefore, h.auditCount(existing.ID), "a duplicate adds nothing to the holder's trail")

	// New tasks get new ids in input order, and read back as returned.
	fresh := []int{0, 2, 3, 5, 6}
	for i := 8; i < len(batch); i++ {
		fresh = append(fresh, i)
	}
	h.checkSubmitted(batch, res, fresh)
	require.Equal(t, "other", res[5].Task.Namespace)
	require.NotEqual(t, existing.ID, res[5].Task.ID, "keys are per namespace")

	// run_at and good_until.
	delayed := h.task(res[3].Task.ID)
	require.True(t, later.Equal(delayed.RunAt))
	require.NotNil(t, delayed.GoodUntil)
	require.True(t, until.Equal(*delayed.GoodUntil))
	require.Equal(t, map[string]state.Step{"a": state.StepWaiting, "b": state.StepPending, "c": state.StepPending, "d": state.StepPending}, states(delayed))
	require.NotNil(t, delayed.Steps[0].RunAt)
	require.True(t, later.Equal(*delayed.Steps[0].RunAt))
	require.Nil(t, h.task(res[0].Task.ID).GoodUntil)

	// The DAG's steps: states, dependencies, priorities, attempts.
	dag := h.task(res[6].Task.ID)
	require.Equal(t, map[string]state.Step{"a": state.StepReady, "b": state.StepPending, "c": state.StepPending, "d": state.StepPending}, states(dag))
	for j, st := range dag.Steps {
		require.Equal(t, j, st.Index)
		require.Equal(t, shared[j].Name, st.Name)
	}
	require.Equal(t, []string{"a"}, dag.Steps[1].DependsOn)
	require.Equal(t, []string{"b", "c"}, dag.Steps[3].DependsOn)
	require.Equal(t, 8, dag.Steps[1].Priority, "task priority plus step priority")
	require.Equal(t, 2, dag.Steps[0].MaxAttempts)
	require.Equal(t, 1, dag.Steps[3].MaxAttempts, "at least one attempt")

	// Tags: the filter finds the tagged task only.
	tagged, err := h.s.ListTasks(h.ctx, store.TaskFilter{Tags: map[string]string{"team": "billing"}})
	require.NoError(t, err)
	require.Len(t, tagged, 1)
	require.Equal(t, res[2].Task.ID, tagged[0].ID)
	none, err := h.s.ListTasks(h.ctx, store.TaskFilter{Tags: map[string]string{"team": "other"}})
	require.NoError(t, err)
	require.Empty(t, none, "a duplicate's tags are not written")

	// The ready steps are claimable in priority order.
	h.register("e1")
	top := h.claim("e1", 1)
	require.Len(t, top, 1)
	require.Equal(t, res[6].Task.ID, top[0].TaskID, "highest priority first")
	require.Len(t, h.claim("e1", 100), 4+20, "the held task's step, the first steps of tasks 0 and 2 and of the 20 DAGs, and task 5's only step")
}

// checkSubmitted checks the new tasks among res, at indexes fresh: ids in
// input order, each task read back as returned with its steps, and an
// audit trail of the task's submission, then each step's, in step order.
func (h *harness) checkSubmitted(batch []store.TaskInsert, res []store.InsertResult, fresh []int) {
	t := h.t
	t.Helper()
	var last int64
	for _, i := range fresh {
		r := res[i]
		require.False(t, r.Duplicate, "task %d", i)
		require.Greater(t, r.Task.ID, last, "task %d", i)
		last = r.Task.ID
		got := h.task(r.Task.ID)
		require.Equal(t, state.TaskPending, got.State)
		require.Equal(t, r.Task.Namespace, got.Namespace)
		require.Equal(t, r.Task.Workflow, got.Workflow)
		require.Equal(t, r.Task.Priority, got.Priority)
		require.Equal(t, r.Task.IdempotencyKey, got.IdempotencyKey)
		require.JSONEq(t, string(r.Task.Input), string(got.Input))
		require.True(t, r.Task.RunAt.Equal(got.RunAt), "task %d", i)
		require.True(t, r.Task.CreatedAt.Equal(got.CreatedAt), "task %d", i)
		require.Equal(t, r.Task.GoodUntil == nil, got.GoodUntil == nil, "task %d", i)
		if got.GoodUntil != nil {
			require.True(t, r.Task.GoodUntil.Equal(*got.GoodUntil), "task %d", i)
		}
		require.Equal(t, r.Task.Tags, got.Tags)
		require.Len(t, got.Steps, len(batch[i].Steps), "task %d", i)
		for j, st := range got.Steps {
			require.Equal(t, j, st.Index)
			require.Equal(t, batch[i].Steps[j].Name, st.Name)
		}

		trail, err := h.s.Audit(h.ctx, r.Task.ID)
		require.NoError(t, err)
		want := []string{"/" + string(state.TaskPending)}
		for _, st := range got.Steps {
			want = append(want, st.Name+"/"+string(st.State))
		}
		var events []string
		for _, a := range trail {
			require.Equal(t, "", a.From)
			require.Equal(t, "submitted", a.Reason)
			require.True(t, got.CreatedAt.Equal(a.At), "task %d: submitted at %s, audited at %s", i, got.CreatedAt, a.At)
			require.Zero(t, a.Attempt)
			require.Empty(t, a.EngineID)
			events = append(events, a.Step+"/"+a.To)
		}
		require.Equal(t, want, events, "task %d", i)
	}
}

// Without keys (a path of its own on some stores, for many tasks): the
// same fields, steps and audit, for a few tasks and for many.
func testBulkSubmitWithoutKeys(t *testing.T, h *harness) {
	now := h.clock.Now()
	later, until := now.Add(time.Hour), now.Add(2*time.Hour)
	shared := diamond()
	base := []store.TaskInsert{
		{Priority: 1, Tags: map[string]string{"team": "billing"}, Input: json.RawMessage(`{"n":1}`)},
		{RunAt: later, GoodUntil: until, Steps: shared},
		{Steps: shared, Priority: 5, Tags: map[string]string{"team": "billing", "tier": "gold"}},
		{GoodUntil: until},
	}
	written := 0
	for _, copies := range []int{1, 50} {
		var batch []store.TaskInsert
		var all []int
		for range copies {
			batch = append(batch, base...)
		}
		for i := range batch {
			all = append(all, i)
		}
		from, err := h.s.HistoryEnd(h.ctx)
		require.NoError(t, err)
		res := h.insert(batch...)
		require.Len(t, res, len(batch))
		h.checkSubmitted(batch, res, all)
		// The history tells each submission as its audit trail does.
		trails, entries := map[int64]int{}, 0
		for _, r := range res {
			trails[r.Task.ID] = h.auditCount(r.Task.ID)
			entries += trails[r.Task.ID]
		}
		told := map[int64]int{}
		for _, e := range h.history(store.HistoryQuery{After: from}, entries) {
			if _, ours := trails[e.TaskID]; ours {
				told[e.TaskID]++
			}
		}
		require.Equal(t, trails, told)
		for c := range copies {
			delayed, dag := h.task(res[4*c+1].Task.ID), h.task(res[4*c+2].Task.ID)
			require.Equal(t, map[string]state.Step{"a": state.StepWaiting, "b": state.StepPending, "c": state.StepPending, "d": state.StepPending}, states(delayed))
			require.Equal(t, map[string]state.Step{"a": state.StepReady, "b": state.StepPending, "c": state.StepPending, "d": state.StepPending}, states(dag))
			require.Equal(t, []string{"b", "c"}, dag.Steps[3].DependsOn)
			require.Equal(t, 8, dag.Steps[1].Priority)
		}
		written += copies
		tagged, err := h.s.ListTasks(h.ctx, store.TaskFilter{Tags: map[string]string{"team": "billing"}, Limit: 1000})
		require.NoError(t, err)
		require.Len(t, tagged, 2*written)
		gold, err := h.s.ListTasks(h.ctx, store.TaskFilter{Tags: map[string]string{"tier": "gold"}, Limit: 1000})
		require.NoError(t, err)
		require.Len(t, gold, written)
		require.Equal(t, res[len(res)-2].Task.ID, gold[0].ID, "newest first")
	}
}

func testBulkSubmitSupersede(t *testing.T, h *harness) {
	res := h.insert(
		store.TaskInsert{IdempotencyKey: "k"},
		store.TaskInsert{},
		store.TaskInsert{IdempotencyKey: "k", Supersede: true},
		store.TaskInsert{IdempotencyKey: "k"},
		store.TaskInsert{},
	)
	first, second := res[0].Task.ID, res[2].Task.ID
	require.False(t, res[0].Duplicate)
	require.False(t, res[2].Duplicate)
	require.Equal(t, first, res[2].Superseded, "the supersede takes the key from the task before it in the call")
	require.True(t, res[3].Duplicate)
	require.Equal(t, second, res[3].Task.ID, "a key after the supersede returns its task")
	require.Less(t, first, res[1].Task.ID)
	require.Less(t, res[1].Task.ID, second)
	require.Less(t, second, res[4].Task.ID)
	require.Equal(t, state.TaskCancelled, h.task(first).State)
	require.Equal(t, "k", h.task(second).IdempotencyKey)
	tasks, err := h.s.ListTasks(h.ctx, store.TaskFilter{})
	require.NoError(t, err)
	require.Len(t, tasks, 4)
}

// Two calls with the same keys in opposite orders, at once, for a few
// rounds: each key is one task, which both calls return, and neither call
// waits for the other in a cycle (a deadlock, which fails one of them).
func testBulkSubmitConcurrentKeys(t *testing.T, h *harness) {
	const rounds, n = 5, 200
	batch := func(round int, reverse bool) []store.TaskInsert {
		out := make([]store.TaskInsert, n)
		for i := range out {
			k := i
			if reverse {
				k = n - 1 - i
			}
			out[i] = store.TaskInsert{Namespace: "ns", Workflow: "wf", Version: "1", Steps: chain("only"), IdempotencyKey: fmt.Sprintf("key-%d-%03d", round, k)}
		}
		return out
	}
	for round := range rounds {
		var wg sync.WaitGroup
		results := make([][]store.InsertResult, 2)
		errs := make([]error, 2)
		for c := range 2 {
			wg.Go(func() { results[c], errs[c] = h.s.InsertTasks(h.ctx, batch(round, c == 1)) })
		}
		wg.Wait()
		require.NoError(t, errs[0])
		require.NoError(t, errs[1])
		byKey := map[string]int64{}
		fresh := 0
		for _, res := range results {
			require.Len(t, res, n)
			for _, r := range res {
				if id, ok := byKey[r.Task.IdempotencyKey]; ok {
					require.Equal(t, id, r.Task.ID, "key %s", r.Task.IdempotencyKey)
				}
				byKey[r.Task.IdempotencyKey] = r.Task.ID
				if !r.Duplicate {
					fresh++
				}
			}
		}
		require.Len(t, byKey, n)
		require.Equal(t, n, fresh, "each key inserted once")
	}
	count, err := h.s.CountTasks(h.ctx, store.TaskFilter{})
	require.NoError(t, err)
	require.Equal(t, rounds*n, count)
}

func testBulkSubmitInvalid(t *testing.T, h *harness) {
	bad := make([]store.TaskInsert, 3)
	for i := range bad {
		bad[i] = store.TaskInsert{Namespace: "ns", Workflow: "wf", Version: "1", Steps: chain("a")}
	}
	bad[2].Tags = map[string]string{"-bad": "x"}
	_, err := h.s.InsertTasks(h.ctx, bad)
	require.ErrorIs(t, err, store.ErrInvalid)
	require.ErrorContains(t, err, "task 3 of 3")
	require.ErrorContains(t, err, "-bad")
	bad[2].Tags = nil
	bad[1].Steps = []store.StepInsert{{Name: "a"}}
	_, err = h.s.InsertTasks(h.ctx, bad)
	require.ErrorIs(t, err, store.ErrInvalidInsert)
	require.ErrorContains(t, err, "task 2 of 3")
	require.ErrorContains(t, err, "needs a name and a handler")
	count, err := h.s.CountTasks(h.ctx, store.TaskFilter{})
	require.NoError(t, err)
	require.Zero(t, count)
}

// OddStepTexts are texts a workflow's steps may carry that a store writing
// them into a statement's text, rather than binding them, must quote:
// quotes, placeholders of either database, SQL, and more than ASCII.
var OddStepTexts = []string{`it's`, `''`, `'`, `?`, `?1 $1 :a @b`, `'); DROP TABLE steps; --`, `\'`, `"q"`, `ünï ✓`}

// OddSteps returns a chain of steps whose names, handlers, signals and keys
// hold OddStepTexts, and a signal step at the end.
func OddSteps() []store.StepInsert {
	var steps []store.StepInsert
	for i, s := range OddStepTexts {
		st := store.StepInsert{Name: fmt.Sprintf("%d %s", i, s), Handler: "h " + s, LimitKey: "limit " + s, Limit: 5,
			RateKey: "rate " + s, Rate: store.Rate{Limit: 10, Per: time.Second}, Breaker: &store.BreakerSpec{Key: "breaker " + s, Failures: 3, Cooldown: time.Minute}}
		if i > 0 {
			st.Deps = []int{i - 1}
		}
		steps = append(steps, st)
	}
	return append(steps, store.StepInsert{Name: "wait " + OddStepTexts[0], Kind: store.KindSignal, Handler: store.SignalHandler, Signal: "signal " + OddStepTexts[4],
		Deps: []int{len(steps) - 1}})
}

// The texts of steps are stored as given, whichever way a submission takes
// (alone, among many without keys, with a key).
func testSubmitStepTexts(t *testing.T, h *harness) {
	steps := OddSteps()
	batch := []store.TaskInsert{{Steps: steps}, {Steps: steps}, {Steps: steps, IdempotencyKey: "key " + OddStepTexts[0]}, {Steps: steps}}
	res := slices.Concat(h.insert(batch[0]), h.insert(batch...))
	for i, r := range res {
		got := h.task(r.Task.ID)
		require.Len(t, got.Steps, len(steps), "task %d", i)
		for j, st := range got.Steps {
			require.Equal(t, steps[j].Name, st.Name, "task %d step %d", i, j)
			require.Equal(t, steps[j].Handler, st.Handler, "task %d step %d", i, j)
			require.Equal(t, steps[j].Signal, st.Signal, "task %d step %d", i, j)
			require.Equal(t, steps[j].Kind, st.Kind, "task %d step %d", i, j)
			if d := steps[j].Deps; len(d) > 0 {
				require.Equal(t, []string{steps[d[0]].Name}, st.DependsOn, "task %d step %d", i, j)
			}
		}
	}
	require.Equal(t, "key "+OddStepTexts[0], h.task(res[3].Task.ID).IdempotencyKey)
	// The first steps run, under their keys.
	h.register("e1")
	claimed := h.claim("e1", 100)
	require.Len(t, claimed, len(res), "each task's first step")
	for _, c := range claimed {
		require.Equal(t, steps[0].Handler, c.Handler)
	}
}
