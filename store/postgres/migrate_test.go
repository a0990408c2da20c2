package postgres

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/internal/sqlstore"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/store/storetest"
)

// schemaBefore creates a schema of its own migrated up to, not including,
// migration number version (named name), and returns the server's URL,
// the schema, a connection in it and the migrations. (internal/pgtesting
// imports this package, so the test reads the server's URL itself.)
func schemaBefore(t *testing.T, version int, name string) (string, string, *sql.Conn, []sqlstore.Migration) {
	t.Helper()
	url := os.Getenv("WEFT_TEST_POSTGRES_URL")
	if url == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("WEFT_TEST_POSTGRES_URL is not set")
		}
		t.Skip("WEFT_TEST_POSTGRES_URL is not set")
	}
	ctx := context.Background()
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "test_mig_" + hex.EncodeToString(b[:])
	cfg, err := pgx.ParseConfig(url)
	require.NoError(t, err)
	cfg.RuntimeParams["search_path"] = schema
	db := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { db.Close() })
	_, err = db.ExecContext(ctx, `CREATE SCHEMA `+schema)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = db.ExecContext(context.Background(), `DROP SCHEMA `+schema+` CASCADE`) })
	ms, err := sqlstore.LoadMigrations(migrations, "migrations")
	require.NoError(t, err)
	require.Equal(t, name, ms[version-1].Name)
	conn, err := db.Conn(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	require.NoError(t, sqlstore.Migrate(ctx, conn, ms[:version-1], `INSERT INTO weft_schema (version) VALUES ($1)`))
	return url, schema, conn, ms
}

// TestStepTimeoutsMigration opens a schema written before step timeouts
// (schema 4) with a running and a ready step: after migration 005 both are
// valid, without a timeout or a deadline.
func TestStepTimeoutsMigration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, schema, conn, _ := schemaBefore(t, 5, "005_step_timeouts.sql")

	for _, q := range []string{
		`INSERT INTO engines (id, host, pid, started_at, heartbeat_at, state) VALUES ('old', 'h', 1, 1700000000000000, 1700000000000000, 'live')`,
		`INSERT INTO tasks (id, namespace, workflow, version, state, input, priority, run_at, created_at, started_at, remaining)
			VALUES (1, 'ns', 'wf', '1', 'running', '{}', 0, 1700000000000000, 1700000000000000, 1700000000000000, 2)`,
		`INSERT INTO steps (id, task_id, idx, name, handler, namespace, state, priority, max_attempts, attempt, lease_id, engine_id, started_at)
			VALUES (1, 1, 0, 'running', 'h', 'ns', 'running', 0, 3, 1, 77, 'old', 1700000000000000)`,
		`INSERT INTO steps (id, task_id, idx, name, handler, namespace, state, priority, max_attempts, sort_key)
			VALUES (2, 1, 1, 'ready', 'h', 'ns', 'ready', 0, 3, 1700000000000000)`,
	} {
		_, err := conn.ExecContext(ctx, q)
		require.NoError(t, err)
	}
	require.NoError(t, conn.Close())

	now := time.UnixMicro(1_700_000_000_000_000).Add(time.Minute)
	s, err := Open(ctx, url, Options{Schema: schema, MaxConns: 3, Clock: func() time.Time { return now }})
	require.NoError(t, err)
	defer s.Close()
	fence := store.Fence{StepID: 1, Attempt: 1, LeaseID: 77}
	held, err := s.HeldStep(ctx, "old", fence)
	require.NoError(t, err)
	require.Nil(t, held.Deadline)
	require.Equal(t, "wf", held.Workflow)
	over, err := s.OverdueSteps(ctx, now.Add(24*time.Hour), 10)
	require.NoError(t, err)
	require.Empty(t, over)
	_, due, err := s.NextWake(ctx)
	require.NoError(t, err)
	require.False(t, due)
	claimed, err := s.ClaimSteps(ctx, store.ClaimParams{EngineID: "old", Limit: 10, Now: now})
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	require.Equal(t, "ready", claimed[0].Name)
	require.Nil(t, claimed[0].Deadline, "an old step has no timeout")
	res, err := s.CompleteSteps(ctx, []store.Outcome{
		{Fence: fence, EngineID: "old", State: state.StepCompleted},
		{Fence: claimed[0].Fence, EngineID: "old", State: state.StepCompleted},
	})
	require.NoError(t, err)
	require.Equal(t, []error{nil, nil}, res)
	task, err := s.GetTask(ctx, 1)
	require.NoError(t, err)
	require.Equal(t, state.TaskCompleted, task.State)
}

// TestKeyScopesMigration: keys made before namespace scopes hold in every
// namespace, as they did, and say so (031); a key made after keeps its
// grants' namespaces.
func TestKeyScopesMigration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, schema, conn, _ := schemaBefore(t, 31, "031_key_scopes.sql")
	for i, k := range storetest.OldKeys {
		_, err := conn.ExecContext(ctx, `INSERT INTO api_keys (id, name, hash, permissions, created_at) VALUES ($1, $2, 'ab', $3, $4)`,
			k[0], k[1], k[2], 1700000000000000+i)
		require.NoError(t, err)
	}
	require.NoError(t, conn.Close())
	s, err := Open(ctx, url, Options{Schema: schema, MaxConns: 3})
	require.NoError(t, err)
	defer s.Close()
	storetest.KeyScopesMigrated(t, s)
}

// TestSignalHandlerMigration: signal steps written before they had a
// handler get the engine's, so that an engine claims their waits (032).
func TestSignalHandlerMigration(t *testing.T) {
	t.Parallel()
	url, schema, conn, _ := schemaBefore(t, 32, "032_signal_handler.sql")
	storetest.SignalHandlerMigrated(t, openAfter(t, url, schema, conn, storetest.OldSignalTask...))
}

// openAfter runs statements on conn, in a schema schemaBefore made, closes
// it and opens the store there, which migrates the schema the rest of the
// way; the store is closed when the test ends.
func openAfter(t *testing.T, url, schema string, conn *sql.Conn, statements ...string) Store {
	t.Helper()
	ctx := context.Background()
	for _, q := range statements {
		_, err := conn.ExecContext(ctx, q)
		require.NoError(t, err, q)
	}
	require.NoError(t, conn.Close())
	s, err := Open(ctx, url, Options{Schema: schema, MaxConns: 3})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

// TestAuditPartitionsMigration opens a schema from before the audit trail's
// time partitions with a task and its audit rows, the newest row deleted:
// the rows become audit_kept, the task's trail reads the same, and new
// rows take ids past every one handed out before (the identity's, not the
// rows' highest), in the partition of the clock, which the migration made.
func TestAuditPartitionsMigration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, schema, conn, _ := schemaBefore(t, 33, "033_audit_partitions.sql")
	s := openAfter(t, url, schema, conn, storetest.OldSignalTask[0],
		`INSERT INTO audit (task_id, step, from_state, to_state, at, steps) VALUES (1, '', '', 'pending', 1700000000000000, '["a","ready","wait","pending"]')`,
		`INSERT INTO audit (task_id, step, from_state, to_state, at) VALUES (1, 'a', 'ready', 'running', 1700000000000001)`,
		`DELETE FROM audit WHERE id = 2`)
	trail, err := s.Audit(ctx, 1)
	require.NoError(t, err)
	require.Len(t, trail, 3, "the task's entry and its two steps'")
	_, err = s.CancelTask(ctx, 1, "e1", "migrated")
	require.NoError(t, err)
	rows, err := s.DB().QueryContext(ctx, `SELECT id, tableoid::regclass::text FROM audit ORDER BY id`)
	require.NoError(t, err)
	defer rows.Close()
	var got []string
	for rows.Next() {
		var id int64
		var part string
		require.NoError(t, rows.Scan(&id, &part))
		got = append(got, fmt.Sprint(id, " ", part))
	}
	require.NoError(t, rows.Err())
	require.Greater(t, len(got), 1)
	require.Equal(t, "1 audit_kept", got[0])
	for _, r := range got[1:] {
		require.Regexp(t, `^([3-9]|\d\d+) audit_p\d{8}t\d{6}_\d{8}t\d{6}$`, r, "new rows: ids after 2, in the partition of the clock")
	}
}
