package postgres_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/internal/pgtesting"
	"github.com/weftrun/weft/internal/sqlstore/sqldb"
	"github.com/weftrun/weft/store/postgres"
)

// valueOf is the value a row's v, a T or a *T, writes: nil for NULL.
func valueOf[T any](v any) *T {
	switch v := v.(type) {
	case T:
		return &v
	case *T:
		return v
	}
	return nil
}

// TestCopyWritesEveryKindOfValue: a COPY of the store's bulk writes (int64,
// string, pointers to them, nil) into bigint, integer, text and jsonb
// columns reads back as written, NULLs included, over more rows than one
// chunk of the data holds; a value a column cannot hold, or bytes the
// database refuses, fail the COPY and write nothing.
func TestCopyWritesEveryKindOfValue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtesting.URL(t))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	schema := pgtesting.SchemaName("copy")
	_, err = pool.Exec(ctx, `CREATE SCHEMA `+schema+`; CREATE TABLE `+schema+`.c (id bigint PRIMARY KEY, small integer, big bigint, note text, doc jsonb)`)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), `DROP SCHEMA `+schema+` CASCADE`) })
	db := postgres.NewPoolDB(pool)
	columns := []string{"id", "small", "big", "note", "doc"}

	write := func(rows [][]any) (int64, error) {
		tx, err := db.Begin(ctx)
		require.NoError(t, err)
		if _, err := tx.Exec(ctx, `SET LOCAL search_path = `+schema); err != nil {
			return 0, err
		}
		n, err := tx.(sqldb.Copier).CopyFrom(ctx, "c", columns, sqldb.NewCopyRows(rows))
		if err != nil {
			require.NoError(t, tx.Rollback(ctx))
			return 0, err
		}
		return n, tx.Commit(ctx)
	}
	count := func() int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+schema+`.c`).Scan(&n))
		return n
	}

	long := strings.Repeat("é", 100) // 200 bytes: 3,000 rows are several chunks
	var rows [][]any
	for i := range int64(3000) {
		small, note, doc := &i, &long, new(string)
		*doc = fmt.Sprintf(`{"n": %d, "s": "ünï"}`, i)
		if i%3 == 0 {
			small, note, doc = nil, nil, nil
		}
		rows = append(rows, []any{i, small, -i * 1_000_000_000_000, note, doc})
	}
	rows = append(rows, []any{int64(3000), int64(-2147483648), int64(9223372036854775807), "", `[]`})
	n, err := write(rows)
	require.NoError(t, err)
	require.EqualValues(t, len(rows), n)

	got, err := pool.Query(ctx, `SELECT id, small, big, note, doc::text FROM `+schema+`.c ORDER BY id`)
	require.NoError(t, err)
	defer got.Close()
	i := 0
	for got.Next() {
		var id, big int64
		var small *int32
		var note, doc *string
		require.NoError(t, got.Scan(&id, &small, &big, &note, &doc))
		want := rows[i]
		require.Equal(t, want[0], id)
		require.Equal(t, want[2], big)
		if w := valueOf[int64](want[1]); w == nil {
			require.Nil(t, small, "row %d", i)
		} else {
			require.EqualValues(t, *w, *small, "row %d", i)
		}
		require.Equal(t, valueOf[string](want[3]), note, "row %d", i)
		if w := valueOf[string](want[4]); w == nil {
			require.Nil(t, doc, "row %d", i)
		} else {
			require.JSONEq(t, *w, *doc, "row %d", i)
		}
		i++
	}
	require.NoError(t, got.Err())
	require.Equal(t, len(rows), i)

	for _, bad := range []struct {
		name string
		row  []any
		err  string
	}{
		{"an integer column overflows", []any{int64(5000), int64(1 << 31), int64(0), nil, nil}, "does not fit an integer column"},
		{"a NUL byte in text", []any{int64(5001), nil, int64(0), "a\x00b", nil}, "0x00"},
		{"text that is not JSON", []any{int64(5002), nil, int64(0), nil, "{"}, "json"},
		{"a duplicate key", []any{int64(1), nil, int64(0), nil, nil}, "duplicate key"},
	} {
		_, err := write([][]any{{int64(4000), nil, int64(0), "fine", nil}, bad.row})
		require.ErrorContains(t, err, bad.err, bad.name)
		require.Equal(t, len(rows), count(), "%s: nothing written", bad.name)
		require.Zero(t, pool.Stat().AcquiredConns(), "%s: the connection is back", bad.name)
	}
}
