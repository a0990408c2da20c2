package storetest

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/internal/dag"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// dynamicTests are the conformance tests of decisions, trigger rules,
// batches, signals and progress.
var dynamicTests = []struct {
	name string
	fn   func(t *testing.T, h *harness)
}{
	{"TriggerRuleTruthTable", testTriggerRuleTruthTable},
	{"SkippedOutcome", testSkippedOutcome},
	{"DecisionSkipsUnchosenBranches", testDecision},
	{"DecisionChoosingNone", testDecisionNone},
	{"BatchCreatesAndAggregates", testBatch},
	{"BatchEmpty", testBatchEmpty},
	{"BatchStepLimit", testBatchLimit},
	{"BatchRetryTask", testBatchRetryTask},
	{"SkipsUseNoAttempt", testSkipsUseNoAttempt},
	{"ProgressIsFenced", testProgress},
	{"CheckpointSurvivesReap", testCheckpointReap},
}

func (h *harness) outcome(c store.ClaimedStep, st state.Step) {
	h.t.Helper()
	o := store.Outcome{Fence: c.Fence, EngineID: "e1", State: st}
	if st == state.StepCompleted {
		o.Result = json.RawMessage(fmt.Sprintf(`{"from":%q}`, c.Name))
	}
	require.NoError(h.t, h.complete(o)[0])
}

func claimNamed(t *testing.T, cs []store.ClaimedStep, name string) store.ClaimedStep {
	t.Helper()
	for _, c := range cs {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("%q was not claimed (got %v)", name, names(cs))
	return store.ClaimedStep{}
}

// testTriggerRuleTruthTable runs every rule against every combination of
// two parents' outcomes and checks the child against dag.Decide.
func testTriggerRuleTruthTable(t *testing.T, h *harness) {
	rules := []dag.Rule{dag.AllSuccess, dag.AllDone, dag.OneSuccess, dag.OneFailed, dag.AllFailed, dag.NoneFailed, dag.NoneFailedMinOneSuccess, dag.Always}
	outcomes := []state.Step{state.StepCompleted, state.StepFailed, state.StepSkipped}
	type run struct {
		id     int64
		rule   dag.Rule
		p1, p2 state.Step
	}
	var runs []run
	for _, r := range rules {
		for _, p1 := range outcomes {
			for _, p2 := range outcomes {
				id := h.insert(store.TaskInsert{Steps: []store.StepInsert{
					{Name: "p1", Handler: "h", MaxAttempts: 1},
					{Name: "p2", Handler: "h", MaxAttempts: 1},
					{Name: "child", Handler: "h", MaxAttempts: 1, Deps: []int{0, 1}, TriggerRule: string(r)},
				}})[0].Task.ID
				runs = append(runs, run{id, r, p1, p2})
			}
		}
	}
	for _, r := range runs {
		got := h.claimWith(store.ClaimParams{EngineID: "e1", Limit: 2, TaskID: r.id})
		require.Len(t, got, 2)
		h.outcome(claimNamed(t, got, "p1"), r.p1)
		h.outcome(claimNamed(t, got, "p2"), r.p2)
		var c dag.Counts
		c.Total = 2
		for _, p := range []state.Step{r.p1, r.p2} {
			switch p {
			case state.StepCompleted:
				c.Succeeded++
			case state.StepFailed:
				c.Failed++
			default:
				c.Skipped++
			}
		}
		want := map[dag.Decision]state.Step{dag.Run: state.StepReady, dag.Skip: state.StepSkipped}[dag.Decide(r.rule, c)]
		require.Equal(t, want, states(h.task(r.id))["child"], "rule %s, parents %s and %s", r.rule, r.p1, r.p2)
	}
}

func testSkippedOutcome(t *testing.T, h *harness) {
	id := h.insert(store.TaskInsert{Steps: chain("a", "b")})[0].Task.ID
	a := h.claim("e1", 1)[0]
	require.NoError(t, h.complete(store.Outcome{Fence: a.Fence, State: state.StepSkipped, Reason: "when: false"})[0])
	task := h.task(id)
	require.Equal(t, map[string]state.Step{"a": state.StepSkipped, "b": state.StepSkipped}, states(task))
	require.Equal(t, state.TaskCompleted, task.State, "skipped steps do not fail the task")
	for _, s := range task.Steps {
		require.Zero(t, s.Attempts, "%s never ran: its claim's attempt is given back", s.Name)
	}
}

// testSkipsUseNoAttempt: a step skipped by any path (its when condition,
// a decision that did not choose it, a false trigger rule, a parent that
// failed or was skipped) never ran, and shows no attempt.
func testSkipsUseNoAttempt(t *testing.T, h *harness) {
	id := h.insert(store.TaskInsert{Steps: []store.StepInsert{
		{Name: "when", Handler: "h", MaxAttempts: 3},
		{Name: "after_when", Handler: "h", MaxAttempts: 3, Deps: []int{0}},
		{Name: "d", Handler: "h", MaxAttempts: 3, Kind: store.KindDecision},
		{Name: "chosen", Handler: "h", MaxAttempts: 3, Deps: []int{2}},
		{Name: "not_chosen", Handler: "h", MaxAttempts: 3, Deps: []int{2}},
		{Name: "by_rule", Handler: "h", MaxAttempts: 3, Deps: []int{3}, TriggerRule: string(dag.OneFailed)},
		{Name: "boom", Handler: "h", MaxAttempts: 3},
		{Name: "after_boom", Handler: "h", MaxAttempts: 3, Deps: []int{6}},
	}})[0].Task.ID
	first := h.claim("e1", 10)
	require.NoError(t, h.complete(store.Outcome{Fence: claimNamed(t, first, "when").Fence, State: state.StepSkipped, Reason: "when: false"})[0])
	require.NoError(t, h.complete(store.Outcome{Fence: claimNamed(t, first, "d").Fence, State: state.StepCompleted,
		Result: json.RawMessage(`{"branches":["chosen"]}`), Decide: true, Branches: []string{"chosen"}})[0])
	require.NoError(t, h.complete(store.Outcome{Fence: claimNamed(t, first, "boom").Fence, State: state.StepFailed, Error: "boom"})[0])
	h.ok(claimNamed(t, h.claim("e1", 10), "chosen"), `{}`)
	task := h.task(id)
	for _, name := range []string{"when", "after_when", "not_chosen", "by_rule", "after_boom"} {
		s := stepByName(t, task, name)
		require.Equal(t, state.StepSkipped, s.State, name)
		require.Zero(t, s.Attempts, "%s never ran", name)
	}
}

// decisionTask: d decides between a (with a descendant a2), b and c; j
// converges on a2, b and c.
func decisionTask(h *harness) int64 {
	return h.insert(store.TaskInsert{Steps: []store.StepInsert{
		{Name: "d", Handler: "h", MaxAttempts: 1, Kind: store.KindDecision},
		{Name: "a", Handler: "h", MaxAttempts: 1, Deps: []int{0}},
		{Name: "a2", Handler: "h", MaxAttempts: 1, Deps: []int{1}},
		{Name: "b", Handler: "h", MaxAttempts: 1, Deps: []int{0}},
		{Name: "c", Handler: "h", MaxAttempts: 1, Deps: []int{0}},
		{Name: "j", Handler: "h", MaxAttempts: 1, Deps: []int{2, 3, 4}, TriggerRule: string(dag.NoneFailedMinOneSuccess)},
	}})[0].Task.ID
}

func testDecision(t *testing.T, h *harness) {
	id := decisionTask(h)
	d := h.claim("e1", 10)
	require.Equal(t, []string{"d"}, names(d))
	require.NoError(t, h.complete(store.Outcome{Fence: d[0].Fence, State: state.StepCompleted, Result: json.RawMessage(`{"branches":["b"]}`),
		Decide: true, Branches: []string{"b"}})[0])
	require.Equal(t, map[string]state.Step{"d": state.StepCompleted, "a": state.StepSkipped, "a2": state.StepSkipped, "b": state.StepReady,
		"c": state.StepSkipped, "j": state.StepPending}, states(h.task(id)))
	b := h.claim("e1", 10)
	require.Equal(t, []string{"b"}, names(b))
	h.ok(b[0], `{"chosen":true}`)
	j := h.claim("e1", 10)
	require.Equal(t, []string{"j"}, names(j), "the converging step runs after the one chosen branch")
	require.Equal(t, map[string]json.RawMessage{"b": json.RawMessage(`{"chosen":true}`)}, j[0].Deps, "only branches that ran pass results")
	h.ok(j[0], `{}`)
	require.Equal(t, state.TaskCompleted, h.task(id).State)
	audit, err := h.s.Audit(h.ctx, id)
	require.NoError(t, err)
	var reasons []string
	for _, e := range audit {
		if e.Step == "a" && e.To == string(state.StepSkipped) {
			reasons = append(reasons, e.Reason)
		}
	}
	require.Equal(t, []string{`not chosen by decision "d"`}, reasons)
}

func testDecisionNone(t *testing.T, h *harness) {
	id := decisionTask(h)
	d := h.claim("e1", 10)
	require.NoError(t, h.complete(store.Outcome{Fence: d[0].Fence, State: state.StepCompleted, Decide: true})[0])
	task := h.task(id)
	for _, s := range task.Steps[1:] {
		require.Equal(t, state.StepSkipped, s.State, s.Name)
	}
	require.Equal(t, state.TaskCompleted, task.State)
}

func batchTask(h *harness) int64 {
	return h.insert(store.TaskInsert{Steps: []store.StepInsert{
		{Name: "split", Handler: "h", MaxAttempts: 1, Kind: store.KindBatch},
		{Name: "agg", Handler: "h", MaxAttempts: 1, Deps: []int{0}},
	}})[0].Task.ID
}

func spawn(n int) *store.Spawn {
	items := make([]json.RawMessage, n)
	for i := range items {
		items[i] = json.RawMessage(fmt.Sprintf(`{"from":%d,"to":%d}`, i*10, i*10+10))
	}
	return &store.Spawn{Template: store.StepInsert{Name: "work", Handler: "worker", MaxAttempts: 2}, Items: items}
}

func testBatch(t *testing.T, h *harness) {
	const n = 5000
	id := batchTask(h)
	split := h.claim("e1", 10)
	require.Equal(t, []string{"split"}, names(split))
	start := time.Now()
	require.NoError(t, h.complete(store.Outcome{Fence: split[0].Fence, State: state.StepCompleted, Result: json.RawMessage(`{"batches":"…"}`),
		Spawn: spawn(n)})[0])
	t.Logf("created %d items in one transaction in %s", n, time.Since(start))
	task := h.task(id)
	require.Len(t, task.Steps, n+2)
	item := task.Steps[2+17]
	require.Equal(t, "split[17]", item.Name)
	require.Equal(t, store.KindItem, item.Kind)
	require.Equal(t, "work", item.Template)
	require.Equal(t, "worker", item.Handler)
	require.Equal(t, state.StepReady, item.State)
	require.JSONEq(t, `{"from":170,"to":180}`, string(item.Item))
	require.Equal(t, state.StepPending, states(task)["agg"])

	done := 0
	retried := false
	for done < n {
		got := h.claimWith(store.ClaimParams{EngineID: "e1", Limit: 1000, Handlers: []string{"worker"}})
		require.NotEmpty(t, got)
		for _, c := range got {
			var it struct{ From int }
			require.NoError(t, json.Unmarshal(c.Item, &it))
			if it.From == 420 && !retried {
				// One item fails once and is retried on its own.
				retried = true
				require.NoError(t, h.complete(store.Outcome{Fence: c.Fence, State: state.StepReady, Error: "flaky"})[0])
				continue
			}
			require.NoError(t, h.complete(store.Outcome{Fence: c.Fence, State: state.StepCompleted, Result: json.RawMessage(fmt.Sprint(it.From))})[0])
			done++
			if done < n {
				require.Empty(t, h.claimWith(store.ClaimParams{EngineID: "e1", Limit: 1, Handlers: []string{"h"}}), "agg waits for every item")
			}
		}
	}
	agg := h.claim("e1", 10)
	require.Equal(t, []string{"agg"}, names(agg))
	var results []int
	require.NoError(t, json.Unmarshal(agg[0].Deps["split"], &results))
	require.Len(t, results, n)
	for i, r := range results {
		require.Equal(t, i*10, r, "results are in item order")
	}
	h.ok(agg[0], `{}`)
	require.Equal(t, state.TaskCompleted, h.task(id).State)
	require.True(t, retried)
}

func testBatchEmpty(t *testing.T, h *harness) {
	id := batchTask(h)
	split := h.claim("e1", 10)
	require.NoError(t, h.complete(store.Outcome{Fence: split[0].Fence, State: state.StepCompleted, Spawn: spawn(0)})[0])
	agg := h.claim("e1", 10)
	require.Equal(t, []string{"agg"}, names(agg))
	require.JSONEq(t, `[]`, string(agg[0].Deps["split"]))
	h.ok(agg[0], `{}`)
	require.Equal(t, state.TaskCompleted, h.task(id).State)
}

func testBatchLimit(t *testing.T, h *harness) {
	id := batchTask(h)
	split := h.claim("e1", 10)
	sp := spawn(9)
	sp.MaxSteps = 10
	require.NoError(t, h.complete(store.Outcome{Fence: split[0].Fence, State: state.StepCompleted, Spawn: sp})[0])
	task := h.task(id)
	require.Len(t, task.Steps, 2, "no item is created")
	require.Equal(t, state.StepFailed, task.Steps[0].State)
	require.Contains(t, task.Steps[0].Error, "limit of 10")
	require.Equal(t, state.TaskFailed, task.State)
}

func testBatchRetryTask(t *testing.T, h *harness) {
	id := batchTask(h)
	split := h.claim("e1", 10)
	require.NoError(t, h.complete(store.Outcome{Fence: split[0].Fence, State: state.StepCompleted, Spawn: spawn(3)})[0])
	items := h.claimWith(store.ClaimParams{EngineID: "e1", Limit: 10, Handlers: []string{"worker"}})
	require.Len(t, items, 3)
	for i, c := range items {
		st := state.StepCompleted
		if i == 1 {
			st = state.StepFailed
		}
		h.outcome(c, st)
	}
	task := h.task(id)
	require.Equal(t, state.TaskFailed, task.State)
	require.Equal(t, state.StepSkipped, states(task)["agg"])
	require.NoError(t, h.s.RetryTask(h.ctx, id, "e1", ""))
	again := h.claim("e1", 10)
	require.Equal(t, []string{items[1].Name}, names(again), "only the failed item runs again")
	h.outcome(again[0], state.StepCompleted)
	agg := h.claim("e1", 10)
	require.Equal(t, []string{"agg"}, names(agg))
	require.JSONEq(t, `[{"from":"split[0]"},{"from":"split[1]"},{"from":"split[2]"}]`, string(agg[0].Deps["split"]))
}

func testProgress(t *testing.T, h *harness) {
	h.insert(store.TaskInsert{})
	c := h.claim("e1", 1)[0]
	require.NoError(t, h.s.SaveProgress(h.ctx, c.Fence, 0.25, "row 250 of 1000"))
	step := h.task(c.TaskID).Steps[0]
	require.NotNil(t, step.Progress)
	require.InDelta(t, 0.25, *step.Progress, 1e-9)
	require.Equal(t, "row 250 of 1000", step.ProgressMessage)
	stale := c.Fence
	stale.LeaseID++
	require.ErrorIs(t, h.s.SaveProgress(h.ctx, stale, 0.5, ""), store.ErrStaleLease)
	require.Error(t, h.s.SaveProgress(h.ctx, c.Fence, 1.5, ""))
}

func testCheckpointReap(t *testing.T, h *harness) {
	h.register("e1")
	h.register("e2")
	h.insert(store.TaskInsert{})
	c := h.claim("e1", 1)[0]
	require.NoError(t, h.s.SaveCheckpoint(h.ctx, c.Fence, json.RawMessage(`{"cursor":42}`)))
	h.clock.Advance(time.Minute)
	_, err := h.s.Heartbeat(h.ctx, store.HeartbeatParams{EngineID: "e2", Now: h.clock.Now()})
	require.NoError(t, err)
	n, err := h.s.Reap(h.ctx, h.clock.Now(), h.clock.Now().Add(-30*time.Second), nil, "e2")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	again := h.claim("e2", 1)
	require.Len(t, again, 1)
	require.Equal(t, 2, again[0].Attempts)
	require.JSONEq(t, `{"cursor":42}`, string(again[0].Checkpoint), "the next attempt starts from the checkpoint")
	require.ErrorIs(t, h.s.SaveCheckpoint(h.ctx, c.Fence, json.RawMessage(`{"cursor":1}`)), store.ErrStaleLease, "the lapsed attempt cannot overwrite it")
}
