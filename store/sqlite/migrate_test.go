package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/internal/sqlstore"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/store/storetest"
)

// oldFile is a database file whose schema stops before a migration, as an
// older weft left it, with a connection to write its rows.
type oldFile struct {
	path string
	db   *sql.DB
	conn *sql.Conn
	ms   []sqlstore.Migration
	n    int // migrations applied
}

// schemaBefore makes a database file with the first n migrations applied
// and checks that the next one is named next.
func schemaBefore(t *testing.T, n int, next string) *oldFile {
	t.Helper()
	f := &oldFile{path: filepath.Join(t.TempDir(), "weft.db"), n: n}
	var err error
	f.db, err = sql.Open(driverName, "file:"+f.path+"?_txlock=immediate")
	require.NoError(t, err)
	f.ms, err = sqlstore.LoadMigrations(migrations, "migrations")
	require.NoError(t, err)
	require.Equal(t, next, f.ms[n].Name)
	f.conn, err = f.db.Conn(context.Background())
	require.NoError(t, err)
	require.NoError(t, sqlstore.Migrate(context.Background(), f.conn, f.ms[:n], `INSERT INTO weft_schema (version) VALUES (?)`))
	return f
}

// exec runs statements on the file, in order.
func (f *oldFile) exec(t *testing.T, qs ...string) {
	t.Helper()
	for _, q := range qs {
		_, err := f.conn.ExecContext(context.Background(), q)
		require.NoError(t, err, q)
	}
}

// upgrade applies the next migration.
func (f *oldFile) upgrade(t *testing.T) {
	t.Helper()
	require.NoError(t, sqlstore.Migrate(context.Background(), f.conn, f.ms[:f.n+1], `INSERT INTO weft_schema (version) VALUES (?)`))
}

// close closes the connection and the database.
func (f *oldFile) close(t *testing.T) {
	t.Helper()
	require.NoError(t, f.conn.Close())
	require.NoError(t, f.db.Close())
}

// TestStepTimeoutsMigration opens a database written before step timeouts
// (schema 4) with a running and a ready step: after migration 005 both are
// valid, without a timeout or a deadline.
func TestStepTimeoutsMigration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	old := schemaBefore(t, 4, "005_step_timeouts.sql")
	const at = int64(1_700_000_000_000_000)
	old.exec(t,
		`INSERT INTO engines (id, host, pid, started_at, heartbeat_at, state) VALUES ('old', 'h', 1, 1700000000000000, 1700000000000000, 'live')`,
		`INSERT INTO tasks (id, namespace, workflow, version, state, input, priority, run_at, created_at, started_at, remaining)
			VALUES (1, 'ns', 'wf', '1', 'running', '{}', 0, 1700000000000000, 1700000000000000, 1700000000000000, 2)`,
		`INSERT INTO steps (id, task_id, idx, name, handler, namespace, state, priority, max_attempts, attempt, lease_id, engine_id, started_at)
			VALUES (1, 1, 0, 'running', 'h', 'ns', 'running', 0, 3, 1, 77, 'old', 1700000000000000)`,
		`INSERT INTO steps (id, task_id, idx, name, handler, namespace, state, priority, max_attempts, sort_key)
			VALUES (2, 1, 1, 'ready', 'h', 'ns', 'ready', 0, 3, 1700000000000000)`,
	)
	old.close(t)

	now := time.UnixMicro(at).Add(time.Minute)
	s, err := Open(ctx, old.path, Options{Clock: func() time.Time { return now }})
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

// TestIDsNeverReusedMigration opens a database written before ids were
// kept from reuse (schema 25), whose newest tasks were deleted while the
// audit trail, a signal and the operator log still name them: after
// migration 026 every row keeps its id and columns, the indexes are as
// before, and new tasks, steps and log entries take ids above every id the
// database ever held.
func TestIDsNeverReusedMigration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	old := schemaBefore(t, 25, "026_ids_never_reused.sql")
	conn := old.conn
	const at = 1700000000000000
	old.exec(t,
		`INSERT INTO tasks (id, namespace, workflow, version, state, input, priority, run_at, created_at, finished_at, remaining, tags)
			VALUES (3, 'ns', 'wf', '1', 'completed', '{"n":3}', 2, 1700000000000000, 1700000000000000, 1700000000000000, 0, '{"env":"prod"}')`,
		`INSERT INTO steps (id, task_id, idx, name, handler, namespace, state, priority, max_attempts, attempt, result, kind, finished_at)
			VALUES (7, 3, 0, 'a', 'h', 'ns', 'completed', 2, 3, 1, '{"ok":true}', 'decision', 1700000000000000)`,
		`INSERT INTO audit (id, task_id, step, from_state, to_state, at) VALUES (40, 3, 'a', 'running', 'completed', 1700000000000000)`,
		`INSERT INTO audit (id, task_id, step, from_state, to_state, at) VALUES (41, 5, '', 'running', 'completed', 1700000000000000)`,
		`INSERT INTO signals (id, task_id, name, payload, created_at, step_id) VALUES (2, 5, 'go', 'null', 1700000000000000, 9)`,
		`INSERT INTO operator_log (id, at, actor, action, subject) VALUES (4, 1700000000000000, 'op', 'delete', 'task 5')`,
		`INSERT INTO operator_log (id, at, actor, action, subject) VALUES (5, 1700000000000000, 'op', 'delete', 'task 12')`,
		`INSERT INTO policy_changes (id, at, actor, target, change) VALUES (6, 1700000000000000, 'op', 'ns', 'paused')`,
		`INSERT INTO schedule_audit (id, namespace, workflow, name, at, action) VALUES (8, 'ns', 'wf', 'nightly', 1700000000000000, 'created')`,
	)
	indexes := func() map[string]string {
		rows, err := conn.QueryContext(ctx, `SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL`)
		require.NoError(t, err)
		defer rows.Close()
		out := map[string]string{}
		for rows.Next() {
			var name, q string
			require.NoError(t, rows.Scan(&name, &q))
			out[name] = q
		}
		require.NoError(t, rows.Err())
		return out
	}
	before := indexes()
	old.upgrade(t)
	require.Equal(t, before, indexes(), "every index is made again as it was")
	var input, tags, result, kind string
	var priority int
	require.NoError(t, conn.QueryRowContext(ctx, `SELECT input, tags, priority FROM tasks WHERE id = 3`).Scan(&input, &tags, &priority))
	require.Equal(t, []any{`{"n":3}`, `{"env":"prod"}`, 2}, []any{input, tags, priority})
	require.NoError(t, conn.QueryRowContext(ctx, `SELECT result, kind FROM steps WHERE id = 7 AND task_id = 3`).Scan(&result, &kind))
	require.Equal(t, []any{`{"ok":true}`, "decision"}, []any{result, kind})
	for table, id := range map[string]int{"signals": 2, "operator_log": 4, "policy_changes": 6, "schedule_audit": 8} {
		var n int
		require.NoError(t, conn.QueryRowContext(ctx, `SELECT count(*) FROM `+table+` WHERE id = ?`, id).Scan(&n))
		require.Equal(t, 1, n, table)
	}
	old.close(t)

	s, err := Open(ctx, old.path, Options{Clock: func() time.Time { return time.UnixMicro(at) }})
	require.NoError(t, err)
	defer s.Close()
	res, err := s.InsertTasks(ctx, []store.TaskInsert{{Namespace: "ns", Workflow: "wf", Version: "1",
		Steps: []store.StepInsert{{Name: "a", Handler: "h", MaxAttempts: 1}}}})
	require.NoError(t, err)
	task, err := s.GetTask(ctx, res[0].Task.ID)
	require.NoError(t, err)
	require.Greater(t, task.ID, int64(12), "above the deleted tasks that the audit trail and the operator log still name")
	require.Greater(t, task.Steps[0].ID, int64(9), "above the deleted step that a signal still names")
}

// TestEveryIDIsAutoincrement is the rule behind ids never reused: every
// table of the schema keyed by an integer id hands its ids out with
// AUTOINCREMENT (policy_version holds one row, id 1, and hands out none).
func TestEveryIDIsAutoincrement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "weft.db")
	s, err := Open(ctx, path, Options{})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	db, err := sql.Open(driverName, "file:"+path)
	require.NoError(t, err)
	defer db.Close()
	rows, err := db.QueryContext(ctx, `SELECT name, sql FROM sqlite_master WHERE type = 'table' AND sql LIKE '%INTEGER PRIMARY KEY%'`)
	require.NoError(t, err)
	defer rows.Close()
	n := 0
	for rows.Next() {
		var name, q string
		require.NoError(t, rows.Scan(&name, &q))
		if name == "policy_version" {
			continue
		}
		n++
		require.Contains(t, q, "INTEGER PRIMARY KEY AUTOINCREMENT", "table %s", name)
	}
	require.NoError(t, rows.Err())
	require.GreaterOrEqual(t, n, 8, "tasks, steps, audit, signals, webhooks and the logs")
}

// TestKeyScopesMigration opens a database written before keys' grants named
// namespaces (schema 28): after migration 029 its keys hold in every
// namespace, as they did, and say so.
func TestKeyScopesMigration(t *testing.T) {
	t.Parallel()
	old := schemaBefore(t, 28, "029_key_scopes.sql")
	for i, k := range storetest.OldKeys {
		old.exec(t, fmt.Sprintf(`INSERT INTO api_keys (id, name, hash, permissions, created_at) VALUES ('%s', '%s', 'ab', '%s', %d)`,
			k[0], k[1], k[2], 1700000000000000+i))
	}
	old.close(t)
	s, err := Open(context.Background(), old.path, Options{})
	require.NoError(t, err)
	defer s.Close()
	storetest.KeyScopesMigrated(t, s)
}

// TestSignalHandlerMigration opens a database written before signal steps
// had a handler (schema 29): after migration 030 an engine claims their
// waits.
func TestSignalHandlerMigration(t *testing.T) {
	t.Parallel()
	old := schemaBefore(t, 29, "030_signal_handler.sql")
	old.exec(t, storetest.OldSignalTask...)
	old.close(t)
	s, err := Open(context.Background(), old.path, Options{})
	require.NoError(t, err)
	defer s.Close()
	storetest.SignalHandlerMigrated(t, s)
}
