package admin

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// TestScope: a bulk action refuses an empty filter without All and a
// state it cannot apply to, and otherwise narrows the filter to the states
// it applies to, with the default batch size.
func TestScope(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		req    BulkRequest
		err    string
		states []state.Task
	}{
		{"empty", BulkRequest{}, "the filter is empty", nil},
		{"all", BulkRequest{All: true}, "", cancellable},
		{"ids", BulkRequest{IDs: []int64{1}}, "", cancellable},
		{"not a state", BulkRequest{Filter: store.TaskFilter{State: "bogus"}}, `"bogus" is not a task state`, nil},
		{"wrong state", BulkRequest{Filter: store.TaskFilter{State: state.TaskCompleted}}, "tasks that are completed cannot be cancelled", nil},
		{"right state", BulkRequest{Filter: store.TaskFilter{State: state.TaskRunning}}, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := tc.req
			err := scope("cancel", &r, cancellable)
			if tc.err != "" {
				require.ErrorIs(t, err, store.ErrInvalid)
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, DefaultBatchSize, r.BatchSize)
			require.Equal(t, tc.states, r.Filter.States)
		})
	}
}
