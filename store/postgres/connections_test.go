package postgres_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/store"
)

// TestMigrationsOnTheirOwnConnection: the store never writes on the server
// process that ran its migrations. One that had run them (an UPDATE of no
// rows was enough) wrote every later bulk submission 15 to 20% slower, and
// the pool kept handing it out.
func TestMigrationsOnTheirOwnConnection(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, tr, _ := traced(t, "migconn")
	migrated := tr.processes("weft_schema")
	require.NotEmpty(t, migrated, "the migrations' statements were traced")
	for range 3 {
		_, err := s.InsertTasks(ctx, []store.TaskInsert{{Namespace: "ns", Workflow: "wf", Version: "1",
			Steps: []store.StepInsert{{Name: "s", Handler: "h", MaxAttempts: 1}}}})
		require.NoError(t, err)
	}
	writers := tr.processes("INSERT INTO tasks")
	require.NotEmpty(t, writers, "the inserts were traced")
	for pid := range writers {
		require.False(t, migrated[pid], "server process %d ran the migrations and then the store's writes", pid)
	}
}
