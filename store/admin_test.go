package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// TestTaskFilterSelects: every field that narrows a filter makes it
// select; the cursor, the page size and the staleness do not.
func TestTaskFilterSelects(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		f       store.TaskFilter
		selects bool
	}{
		{"nothing", store.TaskFilter{}, false},
		{"paging", store.TaskFilter{BeforeID: 9, Limit: 10, StaleAfter: time.Minute}, false},
		{"namespace", store.TaskFilter{Namespace: "n"}, true},
		{"workflow", store.TaskFilter{Workflow: "w"}, true},
		{"state", store.TaskFilter{State: state.TaskFailed}, true},
		{"states", store.TaskFilter{States: []state.Task{state.TaskFailed}}, true},
		{"created after", store.TaskFilter{CreatedAfter: time.Now()}, true},
		{"created before", store.TaskFilter{CreatedBefore: time.Now()}, true},
		{"finished before", store.TaskFilter{FinishedBefore: time.Now()}, true},
		{"tags", store.TaskFilter{Tags: map[string]string{"k": "v"}}, true},
		{"schedule", store.TaskFilter{Schedule: "nightly"}, true},
		{"attention", store.TaskFilter{Attention: true}, true},
		{"key", store.TaskFilter{Key: "k"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.selects, tc.f.Selects())
		})
	}
}
