package postgres_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/internal/pgtesting"
	"github.com/weftrun/weft/internal/sqlstore/sqldb"
	"github.com/weftrun/weft/store/postgres"
)

// TestTransactionsBeginAndCommitWithTheirStatements: a write transaction's
// BEGIN goes with its first statement and its last statements (queued)
// with its COMMIT; what fails in the last statements rolls the whole
// transaction back, and every connection goes back to the pool.
func TestTransactionsBeginAndCommitWithTheirStatements(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, schema, db := oneTable(t, "pipe")
	count := func() int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+schema+`.t`).Scan(&n))
		return n
	}
	insert := func(v int) sqldb.Statement {
		return sqldb.Statement{Query: `INSERT INTO ` + schema + `.t VALUES ($1)`, Args: []any{v}}
	}
	for _, tc := range []struct {
		name  string
		first func(tx sqldb.Tx) error // nil: no statement before the last ones
		last  []sqldb.Statement
		ok    bool
		rows  int // in the table after
	}{
		{"first and last", func(tx sqldb.Tx) error { _, err := tx.Exec(ctx, insert(1).Query, 1); return err },
			[]sqldb.Statement{insert(2), insert(3)}, true, 3},
		{"last only", nil, []sqldb.Statement{insert(4)}, true, 4},
		{"a query first", func(tx sqldb.Tx) error {
			rows, err := tx.Query(ctx, `SELECT v FROM `+schema+`.t ORDER BY v`)
			if err != nil {
				return err
			}
			n := 0
			for rows.Next() {
				n++
			}
			require.Equal(t, 4, n)
			return rows.Close()
		}, []sqldb.Statement{insert(5)}, true, 5},
		{"a last one fails", func(tx sqldb.Tx) error { _, err := tx.Exec(ctx, insert(6).Query, 6); return err },
			[]sqldb.Statement{insert(7), insert(1), insert(8)}, false, 5},
		{"the first fails", func(tx sqldb.Tx) error {
			var v int
			return tx.QueryRow(ctx, `SELECT 1/0`).Scan(&v)
		}, nil, false, 5},
	} {
		tx, err := db.Begin(ctx)
		require.NoError(t, err, tc.name)
		if tc.first != nil {
			if err := tc.first(tx); err != nil {
				require.False(t, tc.ok, "%s: %v", tc.name, err)
				require.NoError(t, tx.Rollback(ctx), tc.name)
				require.Equal(t, tc.rows, count(), tc.name)
				require.Zero(t, pool.Stat().AcquiredConns(), "%s: the connection is back", tc.name)
				continue
			}
		}
		for _, st := range tc.last {
			tx.(sqldb.Pipeliner).Queue(st)
		}
		err = tx.Commit(ctx)
		if tc.ok {
			require.NoError(t, err, tc.name)
		} else {
			require.Error(t, err, tc.name)
		}
		require.Equal(t, tc.rows, count(), tc.name)
		require.Zero(t, pool.Stat().AcquiredConns(), "%s: the connection is back", tc.name)
	}
}

// TestQueuedStatementsGoWithTheNext: a queued statement runs before the
// transaction's next statement, COPY or COMMIT, so that one sees what it
// wrote; its error comes back from that statement, saying what it was, and
// a rolled back transaction drops it.
func TestQueuedStatementsGoWithTheNext(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, schema, db := oneTable(t, "queue")
	insert := func(v int) sqldb.Statement {
		return sqldb.Statement{Query: `INSERT INTO ` + schema + `.t VALUES ($1)`, Args: []any{v}, What: "add a row"}
	}
	count := func(q sqldb.Querier) (int, error) {
		var n int
		err := q.QueryRow(ctx, `SELECT count(*) FROM `+schema+`.t`).Scan(&n)
		return n, err
	}
	for _, tc := range []struct {
		name string
		run  func(tx sqldb.Tx) error // queues and runs statements, then commits or rolls back
		err  string                  // what run returns, if it fails
		rows int                     // in the table after
	}{
		{"queued before the first statement", func(tx sqldb.Tx) error {
			tx.(sqldb.Pipeliner).Queue(insert(1))
			n, err := count(tx)
			require.NoError(t, err)
			require.Equal(t, 1, n, "the next statement sees the queued one's row")
			return tx.Commit(ctx)
		}, "", 1},
		{"queued after it, before a plain commit", func(tx sqldb.Tx) error {
			_, err := tx.Exec(ctx, insert(2).Query, 2)
			require.NoError(t, err)
			tx.(sqldb.Pipeliner).Queue(insert(3))
			return tx.Commit(ctx)
		}, "", 3},
		{"two queued, then the commit", func(tx sqldb.Tx) error {
			tx.(sqldb.Pipeliner).Queue(insert(4))
			tx.(sqldb.Pipeliner).Queue(insert(5))
			return tx.Commit(ctx)
		}, "", 5},
		{"queued before a copy", func(tx sqldb.Tx) error {
			tx.(sqldb.Pipeliner).Queue(insert(6))
			tx.(sqldb.Pipeliner).Queue(sqldb.Statement{Query: `SET LOCAL search_path = ` + schema})
			n, err := tx.(sqldb.Copier).CopyFrom(ctx, "t", []string{"v"}, pgx.CopyFromRows([][]any{{7}}))
			require.NoError(t, err)
			require.EqualValues(t, 1, n)
			return tx.Commit(ctx)
		}, "", 7},
		{"a queued statement fails", func(tx sqldb.Tx) error {
			tx.(sqldb.Pipeliner).Queue(insert(1))
			_, err := count(tx)
			require.NoError(t, tx.Rollback(ctx))
			return err
		}, "add a row: ERROR: duplicate key", 7},
		{"a queued statement fails at the commit", func(tx sqldb.Tx) error {
			_, err := tx.Exec(ctx, insert(8).Query, 8)
			require.NoError(t, err)
			tx.(sqldb.Pipeliner).Queue(insert(2))
			return tx.Commit(ctx)
		}, "add a row: ERROR: duplicate key", 7},
		{"rolled back", func(tx sqldb.Tx) error {
			tx.(sqldb.Pipeliner).Queue(insert(9))
			return tx.Rollback(ctx)
		}, "", 7},
	} {
		runTx(t, pool, schema, db, tc.name, tc.run, tc.err, tc.rows)
	}
}

// oneTable opens a pool on a new schema holding one table, t (v int
// primary key), dropped after the test, and the store's transactions on
// the pool.
func oneTable(t *testing.T, name string) (*pgxpool.Pool, string, sqldb.DB) {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtesting.URL(t))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	schema := pgtesting.SchemaName(name)
	_, err = pool.Exec(ctx, `CREATE SCHEMA `+schema+`; CREATE TABLE `+schema+`.t (v int PRIMARY KEY)`)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), `DROP SCHEMA `+schema+` CASCADE`) })
	return pool, schema, postgres.NewPoolDB(pool)
}

// TestFollowedStatementsGoWithTheOneBefore: a followed statement runs right
// after the transaction's next statement, its rows read once that one's
// are; left unread, its rows are discarded before the next statement, and
// a failed one fails the transaction.
func TestFollowedStatementsGoWithTheOneBefore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, schema, db := oneTable(t, "follow")
	ints := func(rows sqldb.Rows) ([]int, error) {
		var out []int
		for rows.Next() {
			var v int
			if err := rows.Scan(&v); err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, rows.Close()
	}
	values := `SELECT v FROM ` + schema + `.t ORDER BY v`
	for _, tc := range []struct {
		name string
		run  func(tx sqldb.Tx) error // commits or rolls back
		err  string
		rows int
	}{
		{"read after the statement before", func(tx sqldb.Tx) error {
			f := tx.(sqldb.Pipeliner).Follow(sqldb.Statement{Query: values})
			_, err := tx.Exec(ctx, `INSERT INTO `+schema+`.t VALUES (1), (2)`)
			require.NoError(t, err)
			got, err := ints(f)
			require.NoError(t, err)
			require.Equal(t, []int{1, 2}, got, "it ran after the insert")
			return tx.Commit(ctx)
		}, "", 2},
		{"after a query's rows", func(tx sqldb.Tx) error {
			f := tx.(sqldb.Pipeliner).Follow(sqldb.Statement{Query: `SELECT 7`})
			rows, err := tx.Query(ctx, values)
			require.NoError(t, err)
			got, err := ints(rows)
			require.NoError(t, err)
			require.Equal(t, []int{1, 2}, got)
			got, err = ints(f)
			require.NoError(t, err)
			require.Equal(t, []int{7}, got)
			return tx.Commit(ctx)
		}, "", 2},
		{"left unread", func(tx sqldb.Tx) error {
			tx.(sqldb.Pipeliner).Follow(sqldb.Statement{Query: values})
			_, err := tx.Exec(ctx, `INSERT INTO `+schema+`.t VALUES (3)`)
			require.NoError(t, err)
			_, err = tx.Exec(ctx, `INSERT INTO `+schema+`.t VALUES (4)`)
			require.NoError(t, err)
			return tx.Commit(ctx)
		}, "", 4},
		{"left unread, then the commit", func(tx sqldb.Tx) error {
			tx.(sqldb.Pipeliner).Follow(sqldb.Statement{Query: values})
			_, err := tx.Exec(ctx, `INSERT INTO `+schema+`.t VALUES (5)`)
			require.NoError(t, err)
			return tx.Commit(ctx)
		}, "", 5},
		{"it fails, unread", func(tx sqldb.Tx) error {
			tx.(sqldb.Pipeliner).Follow(sqldb.Statement{Query: `SELECT 1/0`, What: "divide"})
			_, err := tx.Exec(ctx, `INSERT INTO `+schema+`.t VALUES (6)`)
			require.NoError(t, err)
			return tx.Commit(ctx)
		}, "divide: ERROR: division by zero", 5},
		{"the statement before fails", func(tx sqldb.Tx) error {
			f := tx.(sqldb.Pipeliner).Follow(sqldb.Statement{Query: values})
			_, err := tx.Exec(ctx, `INSERT INTO `+schema+`.t VALUES (1)`)
			require.ErrorContains(t, err, "duplicate key")
			_, err = ints(f)
			require.Error(t, err, "it did not run")
			return tx.Rollback(ctx)
		}, "", 5},
	} {
		runTx(t, pool, schema, db, tc.name, tc.run, tc.err, tc.rows)
	}
}

// runTx runs one case of a transaction test in a transaction of db: run
// commits or rolls it back and returns wantErr, if set; then the table t
// holds rows rows and the connection is back in the pool.
func runTx(t *testing.T, pool *pgxpool.Pool, schema string, db sqldb.DB, name string, run func(sqldb.Tx) error, wantErr string, rows int) {
	t.Helper()
	ctx := context.Background()
	tx, err := db.Begin(ctx)
	require.NoError(t, err, name)
	err = run(tx)
	if wantErr == "" {
		require.NoError(t, err, name)
	} else {
		require.ErrorContains(t, err, wantErr, name)
	}
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+schema+`.t`).Scan(&n))
	require.Equal(t, rows, n, name)
	require.Zero(t, pool.Stat().AcquiredConns(), "%s: the connection is back", name)
}
