package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/store/sqlite"
	"github.com/weftrun/weft/store/storetest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, clock *storetest.Clock, aging time.Duration) store.Store {
		s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "weft.db"), sqlite.Options{Clock: clock.Now, Aging: aging})
		require.NoError(t, err)
		t.Cleanup(func() { s.Close() })
		return s
	})
}

func TestOpenErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, err := sqlite.Open(ctx, "", sqlite.Options{})
	require.ErrorContains(t, err, "empty database path")
	_, err = sqlite.Open(ctx, filepath.Join(t.TempDir(), "missing-dir", "x.db"), sqlite.Options{})
	require.Error(t, err)
}

func TestReopenKeepsData(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "weft.db")
	s, err := sqlite.Open(ctx, path, sqlite.Options{})
	require.NoError(t, err)
	res, err := s.InsertTasks(ctx, []store.TaskInsert{{Namespace: "ns", Workflow: "wf", Version: "1", Steps: []store.StepInsert{{Name: "a", Handler: "h", MaxAttempts: 1}}}})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	s, err = sqlite.Open(ctx, path, sqlite.Options{})
	require.NoError(t, err)
	defer s.Close()
	task, err := s.GetTask(ctx, res[0].Task.ID)
	require.NoError(t, err)
	require.Len(t, task.Steps, 1)
}
