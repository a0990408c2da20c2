package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/internal/pgtesting"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/store/postgres"
)

// TestHistoryWaitsForSlowWriters: a transaction that took an audit id and
// has not committed holds the history back, so a reader that moves on
// while it runs does not skip its entry when it commits after later ones.
func TestHistoryWaitsForSlowWriters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := pgtesting.Open(t, postgres.Options{MaxConns: 4})
	insert := func() int64 {
		res, err := s.InsertTasks(ctx, []store.TaskInsert{{Namespace: "slow", Workflow: "wf", Version: "1",
			Steps: []store.StepInsert{{Name: "a", Handler: "h", MaxAttempts: 1}}}})
		require.NoError(t, err)
		return res[0].Task.ID
	}
	first := insert()
	cursor, err := s.HistoryEnd(ctx)
	require.NoError(t, err)

	// A slow writer takes the next audit id and holds its transaction open.
	slow, err := s.DB().BeginTx(ctx, nil)
	require.NoError(t, err)
	defer slow.Rollback()
	var slowID int64
	require.NoError(t, slow.QueryRowContext(ctx, `INSERT INTO audit (task_id, step, from_state, to_state, at, reason)
		VALUES ($1, '', 'running', 'running', 0, 'slow writer') RETURNING id`, first).Scan(&slowID))
	slowID *= 1 << 13 // a row's first entry is numbered 8,192 times its id (sqlstore's entriesPerRow)
	// Later transactions commit entries with larger ids.
	second := insert()

	seen := map[int64]int{}
	read := func() {
		for {
			page, err := s.History(ctx, store.HistoryQuery{After: cursor, Namespace: "slow"})
			require.NoError(t, err)
			if len(page) == 0 {
				return
			}
			for _, e := range page {
				seen[e.ID]++
				cursor = e.Cursor
			}
		}
	}
	read()
	_, sawSlow := seen[slowID]
	require.False(t, sawSlow, "the uncommitted entry is invisible")
	for id := range seen {
		require.Less(t, id, slowID, "nothing after the running transaction is handed out while it runs")
	}

	require.NoError(t, slow.Commit())
	trail, err := s.Audit(ctx, second)
	require.NoError(t, err)
	deadline := time.Now().Add(20 * time.Second)
	for seen[slowID] == 0 || seen[trail[len(trail)-1].ID] == 0 {
		require.True(t, time.Now().Before(deadline), "the history caught up: %v", seen)
		time.Sleep(10 * time.Millisecond)
		read()
	}
	require.Equal(t, 1, seen[slowID], "the slow writer's entry arrives once it commits")
	for _, e := range trail {
		require.Equal(t, 1, seen[e.ID], "entry %d of the later task, once", e.ID)
	}
}
