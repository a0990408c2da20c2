package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/store/sqlite"
	"github.com/weftrun/weft/store/storetest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, clock *storetest.Clock, aging time.Duration) store.Store {
		s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "weft.db"), sqlite.Options{Clock: clock.Now, Aging: aging})
		require.NoError(t, err)
		t.Cleanup(func() { s.Close() })
		return s
	})
}

// openStore opens a store on a new file in a temporary directory, closed
// when tb ends.
func openStore(tb testing.TB) sqlite.Store {
	tb.Helper()
	s, err := sqlite.Open(context.Background(), filepath.Join(tb.TempDir(), "weft.db"), sqlite.Options{})
	require.NoError(tb, err)
	tb.Cleanup(func() { s.Close() })
	return s
}

func TestOpenErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, err := sqlite.Open(ctx, "", sqlite.Options{})
	require.ErrorContains(t, err, "empty database path")
	_, err = sqlite.Open(ctx, filepath.Join(t.TempDir(), "missing-dir", "x.db"), sqlite.Options{})
	require.Error(t, err)
}

func TestReopenKeepsData(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "weft.db")
	s, err := sqlite.Open(ctx, path, sqlite.Options{})
	require.NoError(t, err)
	res, err := s.InsertTasks(ctx, []store.TaskInsert{{Namespace: "ns", Workflow: "wf", Version: "1", Steps: []store.StepInsert{{Name: "a", Handler: "h", MaxAttempts: 1}}}})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	s, err = sqlite.Open(ctx, path, sqlite.Options{})
	require.NoError(t, err)
	defer s.Close()
	task, err := s.GetTask(ctx, res[0].Task.ID)
	require.NoError(t, err)
	require.Len(t, task.Steps, 1)
}

// TestClaimReadsReadyIndex shows that the claim reads the partial ready
// index in sort order, without sorting the backlog, at any depth.
func TestClaimReadsReadyIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStore(t)
	for _, depth := range []int{1000, 100000} {
		_, err := s.DB().ExecContext(ctx, `WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < ?)
			INSERT INTO steps (task_id, idx, name, handler, namespace, state, priority, sort_key, max_attempts)
			SELECT n + 1000000 * ?, 0, 's', 'h', 'ns', 'ready', 0, n, 3 FROM g`, depth, depth)
		require.NoError(t, err)
		_, err = s.DB().ExecContext(ctx, `ANALYZE`)
		require.NoError(t, err)
		plan, err := s.ExplainClaim(ctx, store.ClaimParams{Limit: 10, Handlers: []string{"h"}})
		require.NoError(t, err)
		require.Contains(t, plan, "USING INDEX steps_ready", "depth %d:\n%s", depth, plan)
		require.NotContains(t, plan, "TEMP B-TREE", "depth %d: the claim must not sort the backlog:\n%s", depth, plan)
		t.Logf("claim plan with %d ready steps:\n%s", depth, plan)
	}
}

// TestFairClaimReadsNamespaceIndex shows that a claim under weights finds
// the namespaces with ready work and takes one namespace's best steps by
// probes of the namespace index, without reading or sorting the backlog.
func TestFairClaimReadsNamespaceIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStore(t)
	// 100k ready steps in 4 namespaces, and a few of a fifth.
	_, err := s.DB().ExecContext(ctx, `WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 100000)
		INSERT INTO steps (task_id, idx, name, handler, namespace, state, priority, sort_key, max_attempts)
		SELECT n, 0, 's', 'h', CASE WHEN n % 10000 = 0 THEN 'rare' ELSE 'ns' || (n % 4) END, 'ready', 0, n, 3 FROM g`)
	require.NoError(t, err)
	_, err = s.DB().ExecContext(ctx, `ANALYZE`)
	require.NoError(t, err)
	plan, err := s.ExplainFairClaim(ctx, store.ClaimParams{Limit: 10, Handlers: []string{"h"}, Namespaces: []string{"rare"}})
	require.NoError(t, err)
	t.Logf("fair claim plans with 100k ready steps:\n%s", plan)
	require.Contains(t, plan, "USING COVERING INDEX steps_ready_namespace (namespace>?)", "the skip scan probes the index:\n%s", plan)
	require.Contains(t, plan, "USING INDEX steps_ready_namespace (namespace=?)", "a namespace's part reads its steps in order:\n%s", plan)
	require.NotContains(t, plan, "TEMP B-TREE", "nothing sorts the backlog:\n%s", plan)
	require.NotContains(t, plan, "SCAN steps\n", "nothing reads the backlog:\n%s", plan)
	require.Contains(t, plan, "steps_ready_namespace (namespace<?)", "whether other namespaces have ready work: one descent each side:\n%s", plan)

	// The ordinary claim of several namespaces keeps to the ready index.
	plan, err = s.ExplainClaim(ctx, store.ClaimParams{Limit: 10, Namespaces: []string{"ns1", "ns2"}})
	require.NoError(t, err)
	require.Contains(t, plan, "USING INDEX steps_ready\n", plan)
	require.NotContains(t, plan, "TEMP B-TREE", plan)
}

func TestRefusesNewerSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "weft.db")
	s, err := sqlite.Open(ctx, path, sqlite.Options{})
	require.NoError(t, err)
	_, err = s.DB().ExecContext(ctx, `INSERT INTO weft_schema (version) VALUES (999)`)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	_, err = sqlite.Open(ctx, path, sqlite.Options{})
	require.ErrorContains(t, err, "database schema version 999 is newer than this weft")
}

// TestOverdueReadsDeadlineIndex shows that OverdueSteps reads the partial
// deadline index, not the steps table, however many steps run.
func TestOverdueReadsDeadlineIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStore(t)
	_, err := s.DB().ExecContext(ctx, `WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 100000)
		INSERT INTO steps (task_id, idx, name, handler, namespace, state, priority, max_attempts, deadline)
		SELECT n, 0, 's', 'h', 'ns', 'running', 0, 3, CASE WHEN n % 1000 = 0 THEN n END FROM g`)
	require.NoError(t, err)
	_, err = s.DB().ExecContext(ctx, `ANALYZE`)
	require.NoError(t, err)
	plan, err := s.ExplainOverdue(ctx, time.Now(), 100)
	require.NoError(t, err)
	require.Contains(t, plan, "USING INDEX steps_deadline", plan)
	require.NotContains(t, plan, "TEMP B-TREE", "the index gives the deadline order:\n%s", plan)
	t.Logf("overdue plan:\n%s", plan)
}

// BenchmarkAttentionBacklog: see storetest.BenchmarkAttentionBacklog.
func BenchmarkAttentionBacklog(b *testing.B) {
	clock := storetest.NewClock()
	s, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "weft.db"), sqlite.Options{Clock: clock.Now})
	require.NoError(b, err)
	b.Cleanup(func() { s.Close() })
	storetest.BenchmarkAttentionBacklog(b, s, clock)
}

// BenchmarkGetTask: see storetest.BenchmarkGetTask.
func BenchmarkGetTask(b *testing.B) {
	storetest.BenchmarkGetTask(b, openStore(b))
}

// BenchmarkClaimSteps: see storetest.BenchmarkClaimSteps.
func BenchmarkClaimSteps(b *testing.B) {
	storetest.BenchmarkClaimSteps(b, func(tb testing.TB) store.Store { return openStore(tb) })
}
