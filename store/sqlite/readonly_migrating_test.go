package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/internal/sqlstore"
	"github.com/weftrun/weft/store/sqlite"
)

// migrateTo applies the first n migrations to the file at path, as
// another process setting it up would, one transaction each.
func migrateTo(t *testing.T, path string, n int) {
	t.Helper()
	ms, err := sqlite.Migrations()
	require.NoError(t, err)
	db, err := sql.Open("sqlite3", "file:"+path+"?_journal_mode=WAL&_txlock=immediate&_busy_timeout=5000")
	require.NoError(t, err)
	defer db.Close()
	conn, err := db.Conn(context.Background())
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, sqlstore.Migrate(context.Background(), conn, ms[:n], `INSERT INTO weft_schema (version) VALUES (?)`))
}

// TestReadOnlyWaitsForAMigrationInProgress: a read-only open of a file
// that another process is migrating (its first migration, one transaction
// per step) waits for the migration instead of refusing the schema as
// behind; a schema that stays behind is refused saying that a migration
// may be under way and what to do.
func TestReadOnlyWaitsForAMigrationInProgress(t *testing.T) {
	t.Parallel()
	ms, err := sqlite.Migrations()
	require.NoError(t, err)

	t.Run("in progress", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "weft.db")
		migrateTo(t, path, 3)
		polled := make(chan int, 1000)
		opts := sqlite.Options{ReadOnly: true}
		sqlite.WithSchemaWait(&opts, time.Minute, func(v int) {
			select {
			case polled <- v:
			default:
			}
		})
		opened := make(chan error, 1)
		go func() {
			s, err := sqlite.Open(context.Background(), path, opts)
			if err == nil {
				s.Close()
			}
			opened <- err
		}()
		require.Equal(t, 3, <-polled, "the reader found the schema behind")
		for n := 4; n <= len(ms); n++ {
			migrateTo(t, path, n) // the other process goes on, a step at a time
		}
		require.NoError(t, <-opened, "the reader waited for the migration to end")
	})

	t.Run("behind for good", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "weft.db")
		migrateTo(t, path, 3)
		opts := sqlite.Options{ReadOnly: true}
		sqlite.WithSchemaWait(&opts, 50*time.Millisecond, nil)
		_, err := sqlite.Open(context.Background(), path, opts)
		require.Error(t, err)
		for _, want := range []string{"at version 3", "if another weft process is setting the database up or upgrading it, retry once it is done", "weft migrate"} {
			require.Contains(t, err.Error(), want)
		}
	})
}
