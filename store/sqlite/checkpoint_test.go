package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/store/sqlite"
)

// TestCheckpointsOffTheWriter: the writer leaves the WAL's checkpoints to
// a connection of its own (its wal_autocheckpoint is far above SQLite's
// 1,000 pages), which copies what was written into the database file
// shortly after the writes stop: a reader of the file alone, without the
// WAL, soon sees every task.
func TestCheckpointsOffTheWriter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "weft.db")
	s, err := sqlite.Open(ctx, path, sqlite.Options{})
	require.NoError(t, err)
	defer s.Close()
	var pages int
	require.NoError(t, s.DB().QueryRowContext(ctx, `PRAGMA wal_autocheckpoint`).Scan(&pages))
	require.Greater(t, pages, 1000, "the writer checkpoints only far past SQLite's default")
	const n = 40
	for range n {
		_, err := s.InsertTasks(ctx, []store.TaskInsert{{Namespace: "ns", Workflow: "wf", Version: "1",
			Steps: []store.StepInsert{{Name: "s", Handler: "h", MaxAttempts: 1}}}})
		require.NoError(t, err)
	}
	// immutable: the file as it is, without its WAL.
	inFile := func() int {
		db, err := sql.Open("sqlite3", "file:"+path+"?mode=ro&immutable=1")
		require.NoError(t, err)
		defer db.Close()
		var tasks int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM tasks`).Scan(&tasks); err != nil {
			return -1 // the file has no tasks table yet
		}
		return tasks
	}
	deadline := time.Now().Add(10 * time.Second)
	for inFile() != n {
		require.True(t, time.Now().Before(deadline), "the database file holds %d tasks of %d", inFile(), n)
		time.Sleep(10 * time.Millisecond)
	}
}
