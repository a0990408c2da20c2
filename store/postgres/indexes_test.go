package postgres_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/internal/pgtesting"
	"github.com/weftrun/weft/store/postgres"
)

// TestIndexRoom: the indexes every claim and outcome writes a new entry in
// leave room on their pages (migration 027; see bench/results/profiles-2026-11.md,
// "Room for new versions in the indexes"), and retention has no index of its own
// (migration 026: it reads tasks_activity).
func TestIndexRoom(t *testing.T) {
	t.Parallel()
	s := pgtesting.Open(t, postgres.Options{MaxConns: 3})
	ctx := context.Background()
	for _, tc := range []struct {
		index   string
		options string // reloptions, comma-separated; empty: the defaults
	}{
		{"steps_pkey", "fillfactor=50"},
		{"steps_task", "fillfactor=50"},
		{"tasks_pkey", "fillfactor=50"},
		{"tasks_state", ""},
		{"audit_task", ""},
	} {
		var options string
		err := s.DB().QueryRowContext(ctx, `SELECT coalesce(array_to_string(reloptions, ','), '') FROM pg_class
			WHERE relname = $1 AND relnamespace = current_schema()::regnamespace`, tc.index).Scan(&options)
		require.NoError(t, err, tc.index)
		require.Equal(t, tc.options, options, tc.index)
	}
	var n int
	require.NoError(t, s.DB().QueryRowContext(ctx, `SELECT count(*) FROM pg_class
		WHERE relname = 'tasks_finished' AND relnamespace = current_schema()::regnamespace`).Scan(&n))
	require.Zero(t, n)
}
