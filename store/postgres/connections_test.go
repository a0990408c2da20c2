package postgres_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/internal/pgtesting"
	"github.com/weftrun/weft/store/postgres"
)

// TestMigrationsOnTheirOwnConnection: the store never writes on the server
// process that ran its migrations. One that had run them (an UPDATE of no
// rows was enough) wrote every later bulk submission 15 to 20% slower, and
// the pool kept handing it out.
func TestMigrationsOnTheirOwnConnection(t *testing.T) {
	t.Parallel()
	s, tr, _ := traced(t, "migconn")
	migrated := tr.processes("INSERT INTO weft_schema")
	require.NotEmpty(t, migrated, "the migrations' statements were traced")
	for range 3 {
		submitNow(t, s)
	}
	writers := tr.processes("INSERT INTO tasks")
	require.NotEmpty(t, writers, "the inserts were traced")
	for pid := range writers {
		require.False(t, migrated[pid], "server process %d ran the migrations and then the store's writes", pid)
	}
}

// TestCurrentSchemaLeftAlone: a store that opens on a current schema reads
// its version, on a connection of its pool, and nothing more: no migration
// lock, no DDL, so no connection of its own for the migrations.
func TestCurrentSchemaLeftAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, first, schema := traced(t, "current")
	require.NotEmpty(t, first.processes("pg_advisory_lock"), "the first open migrates")
	tr := &statements{}
	s, err := postgres.OpenTraced(ctx, pgtesting.URL(t), postgres.Options{Schema: schema, MaxConns: 3}, tr)
	require.NoError(t, err)
	defer s.Close()
	submitNow(t, s)
	require.Empty(t, tr.processes("pg_advisory_lock"), "%q", tr.sent)
	require.Empty(t, tr.processes("CREATE"), "%q", tr.sent)
	require.Len(t, tr.processes("SELECT max(version) FROM weft_schema"), 1, "%q", tr.sent)
}
