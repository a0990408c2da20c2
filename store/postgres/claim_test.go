package postgres_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/store"
)

// TestClaimAfterThePoliciesMoved: a claim sends its first round's query,
// built from the policies it last read, with its first statement; when
// that statement finds the policies moved (here a limit elsewhere, which
// leaves the query as it was), the claim reads them again and claims what
// they allow, from a query of its own. Each case's change is made by
// another handle between two claims of the first.
func TestClaimAfterThePoliciesMoved(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		change store.PolicyChange
		want   int
	}{
		{"a limit elsewhere", store.PolicyChange{Target: "other", Concurrency: ptr(5), Actor: "test"}, 3},
		{"a pause of the namespace", store.PolicyChange{Target: "ns", Paused: ptr(true), Actor: "test"}, 0},
		{"a limit of the namespace", store.PolicyChange{Target: "ns", Concurrency: ptr(1), Actor: "test"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			hs := handles(t, 2)
			got, err := hs[0].ClaimSteps(ctx, store.ClaimParams{EngineID: "e", Limit: 5})
			require.NoError(t, err)
			require.Empty(t, got, "nothing to claim yet; the policies are read")
			tasks := make([]store.TaskInsert, 3)
			for i := range tasks {
				tasks[i] = store.TaskInsert{Namespace: "ns", Workflow: "wf", Version: "1", Steps: []store.StepInsert{{Name: "s", Handler: "h", MaxAttempts: 1}}}
			}
			_, err = hs[0].InsertTasks(ctx, tasks)
			require.NoError(t, err)
			_, err = hs[1].SetPolicy(ctx, tc.change)
			require.NoError(t, err)
			got, err = hs[0].ClaimSteps(ctx, store.ClaimParams{EngineID: "e", Limit: 5})
			require.NoError(t, err)
			require.Len(t, got, tc.want)
		})
	}
}
