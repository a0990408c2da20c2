package weft_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// What the engine offers remote workers treats their steps as it treats its
// own: a batch item runs its template, and a decision's result decides.
func TestRemoteOutcomesFollowTheDefinition(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEngine(t, backends()["sqlite"](t), weft.Config{})
	register(t, e, weft.NewWorkflow("test", "remote", "1").
		Template("item", "work", weft.WithConfig(map[string]int{"size": 3}), weft.WithRetry(weft.RetryPolicy{MaxAttempts: 1})).
		Step("pick", "choose", weft.AsDecision()).
		Step("left", "work", weft.DependsOn("pick")).
		Step("split", "split", weft.AsBatch("item"), weft.DependsOn("left")))
	claimed := func(s store.Step) store.ClaimedStep {
		s.Namespace = "test"
		return store.ClaimedStep{Step: s, Workflow: "remote", Version: "1", Fence: store.Fence{StepID: 1, Attempt: 1, LeaseID: 1}}
	}

	item := claimed(store.Step{Index: 3, Name: "split[0]", Kind: store.KindItem, Template: "item", Attempts: 1})
	def, err := e.StepDefinition(ctx, item)
	require.NoError(t, err)
	require.Equal(t, "item", def.Name)
	require.JSONEq(t, `{"size": 3}`, string(def.Config))
	o, err := e.FailureOutcome(ctx, item, weft.Failure{Message: "boom"}, "worker")
	require.NoError(t, err)
	require.Equal(t, state.StepFailed, o.State, "the template allows one attempt")

	pick := claimed(store.Step{Index: 0, Name: "pick", Kind: store.KindDecision, Attempts: 1})
	o, err = e.CompletionOutcome(ctx, pick, json.RawMessage(`{"branches": ["left"]}`), "worker")
	require.NoError(t, err)
	require.Equal(t, state.StepCompleted, o.State)
	require.True(t, o.Decide)
	require.Equal(t, []string{"left"}, o.Branches)
	o, err = e.CompletionOutcome(ctx, pick, json.RawMessage(`{"branches": ["split"]}`), "worker")
	require.NoError(t, err)
	require.Equal(t, state.StepFailed, o.State, "a decision may choose only its direct children")

	o, err = e.FailureOutcome(ctx, claimed(store.Step{Index: 9, Name: "gone", Attempts: 1}), weft.Failure{Message: "boom"}, "worker")
	require.NoError(t, err)
	require.Equal(t, state.StepFailed, o.State, "a step the definition does not have fails")
}
