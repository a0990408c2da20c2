package sqlite_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/store/sqlite"
)

// TestMemoryNotCounted: SQLite's allocation statistics are off (settings.go)
// once a store has opened its file and migrated it.
func TestMemoryNotCounted(t *testing.T) {
	t.Parallel()
	openStore(t)
	require.Zero(t, sqlite.MemoryCounted(), "SQLite counts its allocations")
}

// TestLargeWritesSpillTheirJournals: a submission large enough that its
// statements' journals outgrow what SQLite keeps in memory (settings.go)
// spills them to a file and succeeds, as do a claim and the outcomes of
// thousands of steps. A spill size of 256 KiB or more failed here with
// "database or disk is full".
func TestLargeWritesSpillTheirJournals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStore(t)
	for range 2 {
		in := make([]store.TaskInsert, 10_000)
		for i := range in {
			in[i] = store.TaskInsert{Namespace: "ns", Workflow: "wf", Version: "1", Input: []byte(`{"n":1}`),
				Steps: []store.StepInsert{{Name: "only", Handler: "h", MaxAttempts: 3}}}
		}
		res, err := s.InsertTasks(ctx, in)
		require.NoError(t, err)
		require.Len(t, res, len(in))
	}
	got, err := s.ClaimSteps(ctx, store.ClaimParams{EngineID: "e1", Limit: 5_000})
	require.NoError(t, err)
	require.Len(t, got, 5_000)
	outcomes := make([]store.Outcome, len(got))
	for i, c := range got {
		outcomes[i] = store.Outcome{Fence: c.Fence, EngineID: "e1", State: state.StepCompleted, Result: []byte(`{"ok":true}`)}
	}
	errs, err := s.CompleteSteps(ctx, outcomes)
	require.NoError(t, err)
	for _, e := range errs {
		require.NoError(t, e)
	}
}
