package sqldb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	_ "github.com/mattn/go-sqlite3" // the driver of the held writer's tests
	"github.com/stretchr/testify/require"
)

// heldDB opens a SQLite file as the SQLite store does: a writer of two
// connections, one of them held for the store's writes.
func heldDB(t *testing.T) (*SQLDB, *sql.DB) {
	t.Helper()
	w, err := sql.Open("sqlite3", "file:"+filepath.Join(t.TempDir(), "held.db")+"?_journal_mode=WAL&_busy_timeout=50&_foreign_keys=on")
	require.NoError(t, err)
	w.SetMaxOpenConns(2)
	_, err = w.Exec(`CREATE TABLE parents (id INTEGER PRIMARY KEY);
		CREATE TABLE kids (id INTEGER PRIMARY KEY, parent INTEGER REFERENCES parents (id) DEFERRABLE INITIALLY DEFERRED)`)
	require.NoError(t, err)
	d, err := NewSQLDB(context.Background(), w, w, true)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, d.Close()) })
	return d, w
}

func count(t *testing.T, d *SQLDB, table string) int {
	t.Helper()
	var n int
	require.NoError(t, d.QueryRow(context.Background(), "SELECT count(*) FROM "+table).Scan(&n))
	return n
}

// TestHeldWriterEndsEveryTransaction: whatever a write did, the held
// connection is outside any transaction afterwards, so the next write
// begins.
func TestHeldWriterEndsEveryTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		// write runs in a transaction and ends it; ok: it committed.
		write func(t *testing.T, tx Tx)
		ok    bool
	}{
		{"committed", func(t *testing.T, tx Tx) {
			_, err := tx.Exec(ctx, "INSERT INTO parents (id) VALUES (1)")
			require.NoError(t, err)
			require.NoError(t, tx.Commit(ctx))
		}, true},
		{"rolled back after a failed statement", func(t *testing.T, tx Tx) {
			_, err := tx.Exec(ctx, "INSERT INTO parents (id) VALUES (1)")
			require.NoError(t, err)
			_, err = tx.Exec(ctx, "INSERT INTO nowhere VALUES (1)")
			require.Error(t, err)
			require.NoError(t, tx.Rollback(ctx))
		}, false},
		{"its COMMIT refused", func(t *testing.T, tx Tx) {
			// A deferred constraint fails the COMMIT, which leaves
			// SQLite's transaction open.
			_, err := tx.Exec(ctx, "INSERT INTO kids (id, parent) VALUES (1, 99)")
			require.NoError(t, err)
			require.ErrorContains(t, tx.Commit(ctx), "FOREIGN KEY")
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d, _ := heldDB(t)
			tx, err := d.Begin(ctx)
			require.NoError(t, err)
			tc.write(t, tx)
			require.ErrorIs(t, tx.Rollback(ctx), sql.ErrTxDone)

			tx, err = d.Begin(ctx)
			require.NoError(t, err, "the next write begins")
			_, err = tx.Exec(ctx, "INSERT INTO parents (id) VALUES (2)")
			require.NoError(t, err)
			require.NoError(t, tx.Commit(ctx))
			want := 1
			if tc.ok {
				want = 2
			}
			require.Equal(t, want, count(t, d, "parents"))
			require.Zero(t, count(t, d, "kids"))
		})
	}
}

// TestHeldWriterOneWriteAtATime: a write waits for the one under way, and
// gives up waiting when its context ends; a transaction of the caller's
// own, on the writer handle, needs no turn.
func TestHeldWriterOneWriteAtATime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, w := heldDB(t)
	first, err := d.Begin(ctx)
	require.NoError(t, err)

	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	_, err = d.Begin(short)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	_, err = d.Exec(short, "INSERT INTO parents (id) VALUES (7)")
	require.ErrorIs(t, err, context.DeadlineExceeded)

	begun := make(chan error, 1)
	go func() {
		tx, err := d.Begin(ctx)
		if err == nil {
			_, err = tx.Exec(ctx, "INSERT INTO parents (id) VALUES (2)")
			err = errors.Join(err, tx.Commit(ctx))
		}
		begun <- err
	}()
	_, err = first.Exec(ctx, "INSERT INTO parents (id) VALUES (1)")
	require.NoError(t, err)
	select {
	case err := <-begun:
		t.Fatalf("a second write ran beside the first: %v", err)
	default:
	}
	require.NoError(t, first.Commit(ctx))
	require.NoError(t, <-begun)

	// The writer handle's other connection serves the caller's own
	// transactions while the store holds its own.
	tx, err := w.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = tx.ExecContext(ctx, "INSERT INTO parents (id) VALUES (3)")
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	require.Equal(t, 3, count(t, d, "parents"))
}

// TestHeldWriterStatementsBounded: statements are prepared once on the held
// connection and kept between writes, up to maxCachedStatements; those
// past it are closed when a write begins, never while one runs (its rows
// may still be read).
func TestHeldWriterStatementsBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, _ := heldDB(t)
	for i := range maxCachedStatements + 10 {
		_, err := d.Exec(ctx, fmt.Sprintf("INSERT INTO parents (id) VALUES (%d)", i))
		require.NoError(t, err)
		_, err = d.Exec(ctx, "UPDATE parents SET id = id WHERE id = ?", i)
		require.NoError(t, err)
	}
	require.Equal(t, maxCachedStatements+10, count(t, d, "parents"))
	require.LessOrEqual(t, len(d.held.stmts), maxCachedStatements)
	require.Greater(t, len(d.held.stmts), maxCachedStatements/2, "kept between writes")
	require.Contains(t, d.held.stmts, "UPDATE parents SET id = id WHERE id = ?")

	// Within one write, rows stay readable however many statements it
	// prepares meanwhile.
	tx, err := d.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	rows, err := tx.Query(ctx, "SELECT id FROM parents ORDER BY id")
	require.NoError(t, err)
	n := 0
	for rows.Next() {
		_, err := tx.Exec(ctx, fmt.Sprintf("UPDATE parents SET id = id WHERE id = %d", n))
		require.NoError(t, err)
		n++
	}
	require.NoError(t, rows.Err())
	require.NoError(t, rows.Close())
	require.Equal(t, maxCachedStatements+10, n)
}

// BenchmarkClaimLimit runs the claim's query of candidates, prepared once
// on the held writer inside a write transaction, with its LIMIT a bare
// parameter and as SQLite's dialect writes it (Dialect.ClaimLimit): binding
// a bare LIMIT parameter has SQLite prepare the statement again.
func BenchmarkClaimLimit(b *testing.B) {
	ctx := context.Background()
	w, err := sql.Open("sqlite3", "file:"+filepath.Join(b.TempDir(), "limit.db")+"?_journal_mode=WAL")
	require.NoError(b, err)
	w.SetMaxOpenConns(2)
	_, err = w.Exec(`CREATE TABLE steps (id INTEGER PRIMARY KEY, state TEXT, handler TEXT, sort_key INTEGER);
		CREATE INDEX steps_ready ON steps (sort_key) WHERE state = 'ready';
		WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1000)
		INSERT INTO steps SELECT i, CASE WHEN i % 100 = 0 THEN 'ready' ELSE 'succeeded' END, 'noop', i FROM n`)
	require.NoError(b, err)
	d, err := NewSQLDB(ctx, w, w, true)
	require.NoError(b, err)
	b.Cleanup(func() { require.NoError(b, d.Close()) })
	for _, limit := range []string{"LIMIT ?", "LIMIT (SELECT ?)"} {
		q := "SELECT id, handler FROM steps WHERE state = 'ready' AND handler IN (?) ORDER BY sort_key " + limit
		b.Run(limit, func(b *testing.B) {
			tx, err := d.Begin(ctx)
			require.NoError(b, err)
			defer tx.Rollback(ctx)
			for b.Loop() {
				rows, err := tx.Query(ctx, q, "noop", 5)
				require.NoError(b, err)
				n := 0
				for rows.Next() {
					n++
				}
				require.NoError(b, rows.Close())
				require.Equal(b, 5, n)
			}
		})
	}
}
