package weft_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/store/sqlite"
	"github.com/weftrun/weft/workflow"
)

// TestDatabaseFileGone deletes the SQLite file under a running engine, or
// replaces it with another database: the engine notices within a poll
// interval or so, says why in its health, logs it once, claims nothing more
// and refuses submissions with ErrDatabaseGone instead of writing into a
// file nobody sees.
func TestDatabaseFileGone(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, path string)
		reason string
	}{
		{"deleted", func(t *testing.T, path string) {
			for _, p := range []string{path, path + "-wal", path + "-shm"} {
				require.NoError(t, os.RemoveAll(p))
			}
		}, "was deleted"},
		{"replaced", func(t *testing.T, path string) {
			other := filepath.Join(filepath.Dir(path), "other.db")
			s, err := sqlite.Open(context.Background(), other, sqlite.Options{})
			require.NoError(t, err)
			require.NoError(t, s.Close())
			require.NoError(t, os.Rename(other, path))
		}, "was replaced"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			path := filepath.Join(t.TempDir(), "weft.db")
			s, err := sqlite.Open(ctx, path, sqlite.Options{})
			require.NoError(t, err)
			t.Cleanup(func() { s.Close() })
			logs := &countingLog{}
			const poll = 20 * time.Millisecond
			e := newEngine(t, s, weft.Config{PollInterval: poll, Logger: slog.New(logs)})
			e.Handle("count", func(context.Context, *weft.Attempt) (any, error) { return nil, nil })
			require.NoError(t, e.Register(ctx, workflow.New("ghost", "one", "1").Step("a", "count")))
			start(t, e)
			sub, err := e.Submit(ctx, weft.Submission{Workflow: "ghost/one"})
			require.NoError(t, err)
			wait(t, e, sub.Task.ID)
			require.False(t, e.Health().Degraded)

			tc.damage(t, path)
			damaged := time.Now()
			// Noticed by the file check (a loop may fail first on the
			// files gone: the check is what must report them).
			eventually(t, "the engine to notice", func() bool { return e.Health().Failing["database_file"] != "" })
			noticed := time.Since(damaged)
			t.Logf("noticed after %s", noticed.Round(time.Millisecond))
			require.Less(t, noticed, 50*poll, "noticed only after %s (a maintenance tick or claim round is at most about a poll interval apart)", noticed)
			h := e.Health()
			require.Contains(t, h.Failing["database_file"], tc.reason)

			_, err = e.Submit(ctx, weft.Submission{Workflow: "ghost/one"})
			require.ErrorIs(t, err, weft.ErrDatabaseGone)
			require.Equal(t, 1, logs.count("ERROR refusing work: the database was deleted or replaced since it was opened; restart the engine"), logs.summary())
		})
	}
}
