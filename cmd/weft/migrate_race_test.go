package main

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/store/sqlite"
)

// TestConcurrentMigrateProcesses runs several real "weft migrate" processes
// on one new SQLite file at once, 20 times: every one succeeds and the
// schema is recorded once per migration.
func TestConcurrentMigrateProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 80 processes; skipped with -short")
	}
	t.Parallel()
	bin, err := buildWeft()
	require.NoError(t, err)
	const (
		tries     = 20
		processes = 4
	)
	ctx := context.Background()
	for try := range tries {
		db := filepath.Join(t.TempDir(), fmt.Sprintf("new%d.db", try))
		outs := make([][]byte, processes)
		errs := make([]error, processes)
		var wg sync.WaitGroup
		for i := range processes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				outs[i], errs[i] = exec.Command(bin, "migrate", "--db", db).CombinedOutput()
			}()
		}
		wg.Wait()
		for i := range processes {
			require.NoError(t, errs[i], "try %d, process %d: %s", try, i, outs[i])
		}
		s, err := sqlite.Open(ctx, db, sqlite.Options{})
		require.NoError(t, err)
		var n, newest int
		require.NoError(t, s.DB().QueryRowContext(ctx, `SELECT count(*), max(version) FROM weft_schema`).Scan(&n, &newest))
		require.NoError(t, s.Close())
		require.Equal(t, newest, n, "try %d: each migration recorded once", try)
	}
}

// TestReadDuringFirstMigration runs a read-only command while another
// process creates and migrates a new SQLite file: it finds no database
// yet, or waits for the migration and reads it, and never refuses the
// schema as behind.
func TestReadDuringFirstMigration(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes; skipped with -short")
	}
	t.Parallel()
	bin, err := buildWeft()
	require.NoError(t, err)
	for try := range 10 {
		db := filepath.Join(t.TempDir(), fmt.Sprintf("new%d.db", try))
		migrate := exec.Command(bin, "migrate", "--db", db)
		require.NoError(t, migrate.Start())
		var out []byte
		for {
			out, err = exec.Command(bin, "tasks", "--db", db).CombinedOutput()
			if err == nil || !strings.Contains(string(out), "no database at") {
				break
			}
		}
		require.NoError(t, err, "try %d: %s", try, out)
		require.Contains(t, string(out), "no tasks")
		require.NoError(t, migrate.Wait())
	}
}
