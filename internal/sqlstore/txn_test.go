package sqlstore

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	_ "github.com/mattn/go-sqlite3" // the driver of the held writer's tests
	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/internal/sqlstore/sqldb"
	"github.com/weftrun/weft/internal/sqlstore/sqltx"
	"github.com/weftrun/weft/internal/sqlstore/transition"
)

// TestWritePanicFreesTheWriter: a write whose function panics (a bug, which
// an HTTP server recovers from) rolls back, so that the held connection
// serves the next write instead of every later write waiting for it.
func TestWritePanicFreesTheWriter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := heldDB(t)
	s := New(Config{DB: d, Dialect: oneWriter{}})
	insert := func(id int) func(t *transition.Tx) error {
		return func(t *transition.Tx) error {
			_, err := t.X.Exec(ctx, "INSERT INTO parents (id) VALUES (?)", id)
			return err
		}
	}
	require.PanicsWithValue(t, "a bug", func() {
		_ = s.write(ctx, "", func(t *transition.Tx) error {
			if err := insert(1)(t); err != nil {
				return err
			}
			panic("a bug")
		})
	})
	done := make(chan error, 1)
	go func() { done <- s.write(ctx, "", insert(2)) }()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the next write still waits for the writer the panicked one held")
	}
	require.Equal(t, 1, countRows(t, d, "parents"), "the panicked write rolled back")
}

// heldDB opens a SQLite file with a table parents as the SQLite store
// does: a writer of two connections, one of them held for the writes.
func heldDB(t *testing.T) *sqldb.SQLDB {
	t.Helper()
	w, err := sql.Open("sqlite3", "file:"+filepath.Join(t.TempDir(), "held.db")+"?_journal_mode=WAL&_busy_timeout=50")
	require.NoError(t, err)
	w.SetMaxOpenConns(2)
	_, err = w.Exec(`CREATE TABLE parents (id INTEGER PRIMARY KEY)`)
	require.NoError(t, err)
	d, err := sqldb.NewSQLDB(context.Background(), w, w, true)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, d.Close()) })
	return d
}

func countRows(t *testing.T, d *sqldb.SQLDB, table string) int {
	t.Helper()
	var n int
	require.NoError(t, d.QueryRow(context.Background(), "SELECT count(*) FROM "+table).Scan(&n))
	return n
}

// oneWriter is the Dialect of a database with one writer at a time and none
// of PostgreSQL's features, as SQLite's is, for the package's own tests.
type oneWriter struct{}

func (oneWriter) Refused(error) bool     { return false }
func (oneWriter) Unavailable(error) bool { return false }
func (oneWriter) Contended(error) bool   { return false }
func (oneWriter) WriteContext(ctx context.Context) (context.Context, error) {
	return ctx, nil
}
func (oneWriter) Numbered() bool                   { return false }
func (oneWriter) Arrays() bool                     { return false }
func (oneWriter) WithWrites() bool                 { return false }
func (oneWriter) TxHistory() bool                  { return false }
func (oneWriter) ExpiredAudit() []string           { return []string{"audit"} }
func (oneWriter) ClaimLock() string                { return "" }
func (oneWriter) ClaimLimit() string               { return "LIMIT ?" }
func (oneWriter) Fence() string                    { return "" }
func (oneWriter) Lock() string                     { return "" }
func (oneWriter) LimitRoom() string                { return "" }
func (oneWriter) FairReadiness() string            { return "" }
func (oneWriter) Explain() (string, int)           { return "EXPLAIN QUERY PLAN", 4 }
func (oneWriter) ExplainAnalyze() string           { return "" }
func (oneWriter) Notification() sqltx.Notification { return sqltx.Notification{} }
