package postgres_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/internal/pgtesting"
	"github.com/weftrun/weft/internal/sqlstore"
	"github.com/weftrun/weft/store/postgres"
)

// TestTransactionsBeginAndCommitWithTheirStatements: a write transaction's
// BEGIN goes with its first statement and its last statements with its
// COMMIT; what fails in the last statements rolls the whole transaction
// back, and every connection goes back to the pool.
func TestTransactionsBeginAndCommitWithTheirStatements(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtesting.URL(t))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	schema := pgtesting.SchemaName("pipe")
	_, err = pool.Exec(ctx, `CREATE SCHEMA `+schema+`; CREATE TABLE `+schema+`.t (v int PRIMARY KEY)`)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), `DROP SCHEMA `+schema+` CASCADE`) })
	db := postgres.NewPoolDB(pool)
	count := func() int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+schema+`.t`).Scan(&n))
		return n
	}
	insert := func(v int) sqlstore.Statement {
		return sqlstore.Statement{Query: `INSERT INTO ` + schema + `.t VALUES ($1)`, Args: []any{v}}
	}
	for _, tc := range []struct {
		name  string
		first func(tx sqlstore.Tx) error // nil: no statement before the last ones
		last  []sqlstore.Statement
		ok    bool
		rows  int // in the table after
	}{
		{"first and last", func(tx sqlstore.Tx) error { _, err := tx.Exec(ctx, insert(1).Query, 1); return err },
			[]sqlstore.Statement{insert(2), insert(3)}, true, 3},
		{"last only", nil, []sqlstore.Statement{insert(4)}, true, 4},
		{"a query first", func(tx sqlstore.Tx) error {
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
		}, []sqlstore.Statement{insert(5)}, true, 5},
		{"a last one fails", func(tx sqlstore.Tx) error { _, err := tx.Exec(ctx, insert(6).Query, 6); return err },
			[]sqlstore.Statement{insert(7), insert(1), insert(8)}, false, 5},
		{"the first fails", func(tx sqlstore.Tx) error {
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
		err = tx.(sqlstore.Finisher).CommitWith(ctx, tc.last)
		if tc.ok {
			require.NoError(t, err, tc.name)
		} else {
			require.Error(t, err, tc.name)
		}
		require.Equal(t, tc.rows, count(), tc.name)
		require.Zero(t, pool.Stat().AcquiredConns(), "%s: the connection is back", tc.name)
	}
}
