package postgres_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/internal/pgtesting"
	"github.com/weftrun/weft/internal/sqlstore"
	"github.com/weftrun/weft/internal/sqlstore/sqldb"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/store/postgres"
	"github.com/weftrun/weft/store/storetest"
)

// openIsolated opens a store in a schema of its own, dropped after the test.
func openIsolated(t *testing.T, clock func() time.Time, aging time.Duration) store.Store {
	return pgtesting.Open(t, postgres.Options{Clock: clock, Aging: aging, MaxConns: 6})
}

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, clock *storetest.Clock, aging time.Duration) store.Store {
		return openIsolated(t, clock.Now, aging)
	})
}

func TestOpenErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, err := postgres.Open(ctx, "postgres://nobody@127.0.0.1:1/x?connect_timeout=1", postgres.Options{})
	require.Error(t, err)
	_, err = postgres.Open(ctx, pgtesting.URL(t), postgres.Options{Schema: "bad-name;drop"})
	require.ErrorContains(t, err, "schema")
	_, err = postgres.Open(ctx, pgtesting.URL(t), postgres.Options{MaxConns: 2})
	require.ErrorContains(t, err, "MaxConns 2: at least 3")
	_, err = postgres.Open(ctx, withParam(pgtesting.URL(t), "pool_max_conns=2"), postgres.Options{})
	require.ErrorContains(t, err, "pool_max_conns=2 in the URL: at least 3")
	s, err := postgres.Open(ctx, withParam(pgtesting.URL(t), "pool_max_conns=3"), postgres.Options{})
	require.NoError(t, err, "the fewest connections a store works with")
	require.NoError(t, s.Close())

	// A reader refuses a schema weft never made (a mistyped search_path)
	// rather than creating it, and opens it once it exists.
	schema := pgtesting.SchemaName("nosuch")
	_, err = postgres.Open(ctx, pgtesting.URL(t), postgres.Options{Schema: schema, Existing: true})
	require.ErrorIs(t, err, store.ErrNotFound)
	require.ErrorContains(t, err, `no weft tables in schema "`+schema+`"`)
	s, err = postgres.Open(ctx, pgtesting.URL(t), postgres.Options{Schema: schema})
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = s.DB().ExecContext(context.Background(), `DROP SCHEMA `+schema+` CASCADE`)
		_ = s.Close()
	})
	r, err := postgres.Open(ctx, pgtesting.URL(t), postgres.Options{Schema: schema, Existing: true})
	require.NoError(t, err)
	require.NoError(t, r.Close())
}

// withParam adds a query parameter to a postgres:// URL.
func withParam(url, param string) string {
	if strings.Contains(url, "?") {
		return url + "&" + param
	}
	return url + "?" + param
}

// TestMaxConnsInURL: the URL's pool_max_conns sizes the store when
// Options.MaxConns is not set, in either form of connection string.
func TestMaxConnsInURL(t *testing.T) {
	t.Parallel()
	for url, want := range map[string]bool{
		"postgres://u@h/db?pool_max_conns=8":                   true,
		"postgresql://u@h/db?sslmode=disable&pool_max_conns=8": true,
		"postgres://u@h/db?sslmode=disable":                    false,
		"postgres://u:pool_max_conns=1@h/db":                   false,
		"host=h dbname=db pool_max_conns=8":                    true,
		"host=h pool_max_conns = 8":                            true,
		"host=h dbname=db":                                     false,
		"host=h application_name=my_pool_max_conns=x":          false,
	} {
		require.Equal(t, want, postgres.MaxConnsInURL(url), url)
	}
}

// TestClaimReadsReadyIndex shows that the claim reads the partial ready
// index in sort order (no sort, no sequential scan) at any depth.
func TestClaimReadsReadyIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openIsolated(t, time.Now, time.Minute).(postgres.Store)
	for _, depth := range []int{1000, 100000} {
		_, err := s.DB().ExecContext(ctx, `INSERT INTO steps (task_id, idx, name, handler, namespace, state, priority, sort_key, max_attempts)
			SELECT g + 1000000 * $1::bigint, 0, 's', 'h', 'ns', 'ready', 0, g, 3 FROM generate_series(1, $1::bigint) g`, depth)
		require.NoError(t, err)
		_, err = s.DB().ExecContext(ctx, `ANALYZE steps`)
		require.NoError(t, err)
		plan, err := s.ExplainClaim(ctx, store.ClaimParams{Limit: 10, Handlers: []string{"h"}})
		require.NoError(t, err)
		require.Contains(t, plan, "Index Scan using steps_ready", "depth %d:\n%s", depth, plan)
		require.NotContains(t, plan, "Sort", "depth %d: the claim must not sort the backlog:\n%s", depth, plan)
		require.NotContains(t, plan, "Seq Scan", "depth %d:\n%s", depth, plan)
		t.Logf("claim plan with %d ready steps:\n%s", depth, plan)
		// Run as a claim runs it (its planner settings), in each kind of
		// transaction that claims (a claim's, and an outcome's or a
		// submission's claim of the steps it made ready), with what it
		// did: in the statement that claims what it selects (c), which
		// reads the claimed steps and their tasks by primary key. Only
		// the claimed rows are sorted (for their audit rows).
		for _, w := range []sqldb.Work{sqldb.Claims, sqldb.Outcomes} {
			ran, err := sqlstore.ExplainClaimRunAs(ctx, s.Store, w, store.ClaimParams{Limit: 10, Handlers: []string{"h"}})
			require.NoError(t, err)
			require.Contains(t, ran, "actual time=", "depth %d, work %d:\n%s", depth, w, ran)
			require.NotContains(t, ran, "Seq Scan", "depth %d, work %d:\n%s", depth, w, ran)
			_, candidates, ok := strings.Cut(ran, "CTE c\n")
			require.True(t, ok, "depth %d, work %d:\n%s", depth, w, ran)
			candidates, rest, ok := strings.Cut(candidates, "CTE g\n")
			require.True(t, ok, "depth %d, work %d:\n%s", depth, w, ran)
			require.Contains(t, candidates, "Index Scan using steps_ready", "depth %d, work %d:\n%s", depth, w, ran)
			require.NotContains(t, candidates, "Sort", "depth %d, work %d:\n%s", depth, w, ran)
			require.Contains(t, rest, "Index Scan using steps_pkey", "depth %d, work %d:\n%s", depth, w, ran)
			require.Contains(t, rest, "Index Cond: (id = ANY", "depth %d, work %d:\n%s", depth, w, ran)
		}
	}
	// Work of any other kind claims nothing: its sessions plan from the
	// statistics, which read tasks in full while they are stale.
	_, err := sqlstore.ExplainClaimRunAs(ctx, s.Store, sqldb.Other, store.ClaimParams{Limit: 10, Handlers: []string{"h"}})
	require.ErrorContains(t, err, "not begun for claims")
}

// TestFairClaimReadsNamespaceIndex shows that a claim under weights finds
// the namespaces with ready work and takes one namespace's best steps by
// probes of the namespace index, without reading or sorting the backlog.
func TestFairClaimReadsNamespaceIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openIsolated(t, time.Now, time.Minute).(postgres.Store)
	// 100k ready steps in 4 namespaces, and a few of a fifth.
	_, err := s.DB().ExecContext(ctx, `INSERT INTO steps (task_id, idx, name, handler, namespace, state, priority, sort_key, max_attempts)
		SELECT g, 0, 's', 'h', CASE WHEN g % 10000 = 0 THEN 'rare' ELSE 'ns' || (g % 4) END, 'ready', 0, g, 3 FROM generate_series(1, 100000) g`)
	require.NoError(t, err)
	_, err = s.DB().ExecContext(ctx, `ANALYZE steps`)
	require.NoError(t, err)
	plan, err := s.ExplainFairClaim(ctx, store.ClaimParams{Limit: 10, Handlers: []string{"h"}, Namespaces: []string{"rare"}})
	require.NoError(t, err)
	t.Logf("fair claim plans with 100k ready steps:\n%s", plan)
	require.Contains(t, plan, "Index Only Scan using steps_ready_namespace", "the skip scan probes the index:\n%s", plan)
	require.Contains(t, plan, "Index Scan using steps_ready_namespace", "a namespace's part reads its steps in order:\n%s", plan)
	require.NotContains(t, plan, "Sort", "nothing sorts the backlog:\n%s", plan)
	require.NotContains(t, plan, "Seq Scan", "nothing reads the backlog:\n%s", plan)
	require.Contains(t, plan, "One-Time Filter", "running steps are counted only while two or more namespaces have ready work:\n%s", plan)
	_, others, ok := strings.Cut(plan, "--\n")
	require.True(t, ok)
	_, others, ok = strings.Cut(others, "--\n")
	require.True(t, ok)
	require.Contains(t, others, "Index Cond: (namespace > 'rare'::text)", "whether other namespaces have ready work: one descent each side:\n%s", others)
	require.Contains(t, others, "Index Only Scan Backward using steps_ready_namespace", others)
	require.Equal(t, 2, strings.Count(others, "Limit"), "each descent reads one entry:\n%s", others)
}

func TestRefusesNewerSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := pgtesting.SchemaName("newer")
	s, err := postgres.Open(ctx, pgtesting.URL(t), postgres.Options{Schema: schema})
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = s.DB().ExecContext(context.Background(), `DROP SCHEMA `+schema+` CASCADE`)
		s.Close()
	})
	_, err = s.DB().ExecContext(ctx, `INSERT INTO weft_schema (version) VALUES (999)`)
	require.NoError(t, err)
	_, err = postgres.Open(ctx, pgtesting.URL(t), postgres.Options{Schema: schema})
	require.ErrorContains(t, err, "database schema version 999 is newer than this weft")
}

// TestOverdueReadsDeadlineIndex shows that OverdueSteps reads the partial
// deadline index in order, not the steps table, however many steps run.
func TestOverdueReadsDeadlineIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openIsolated(t, time.Now, time.Minute).(postgres.Store)
	_, err := s.DB().ExecContext(ctx, `INSERT INTO steps (task_id, idx, name, handler, namespace, state, priority, max_attempts, deadline)
		SELECT g, 0, 's', 'h', 'ns', 'running', 0, 3, CASE WHEN g % 1000 = 0 THEN g END FROM generate_series(1, 100000) g`)
	require.NoError(t, err)
	_, err = s.DB().ExecContext(ctx, `ANALYZE steps`)
	require.NoError(t, err)
	plan, err := s.ExplainOverdue(ctx, time.Now(), 100)
	require.NoError(t, err)
	require.Contains(t, plan, "steps_deadline", plan)
	require.NotContains(t, plan, "Seq Scan on steps", plan)
	t.Logf("overdue plan:\n%s", plan)
}

// TestJITOffUnlessAsked shows that the store's connections run without
// JIT compilation (a short read whose cost the planner overestimates would
// spend hundreds of milliseconds compiling), unless the URL asks for it.
func TestJITOffUnlessAsked(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct{ query, want string }{
		{"", "off"},
		{"jit=on", "on"},
	} {
		schema := pgtesting.SchemaName("jit")
		url := pgtesting.URL(t)
		if tc.query != "" {
			url += "&" + tc.query
		}
		s, err := postgres.Open(ctx, url, postgres.Options{Schema: schema})
		require.NoError(t, err)
		t.Cleanup(func() {
			_, _ = s.DB().ExecContext(context.Background(), `DROP SCHEMA `+schema+` CASCADE`)
			s.Close()
		})
		var jit string
		require.NoError(t, s.DB().QueryRowContext(ctx, `SHOW jit`).Scan(&jit))
		require.Equal(t, tc.want, jit, "URL options %q", tc.query)
	}
}

// TestLimitRoomSkipsLockedNamespaces shows the function the claim locks
// and counts the namespaces of its limits with (migrations 021 and 024): a
// namespace whose lock another transaction holds is returned as not taken
// and not counted when the claim only tries, and counted once the lock is
// free; a namespace the claim knows a count of is bounded from it and the
// totals (limit_claims) while the bound is at most what the claim can use,
// and counted again past it.
func TestLimitRoomSkipsLockedNamespaces(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openIsolated(t, time.Now, time.Minute).(postgres.Store)
	db := s.DB()
	_, err := db.ExecContext(ctx, `INSERT INTO steps (task_id, idx, name, handler, namespace, state, priority, sort_key, max_attempts)
		VALUES (1, 0, 's', 'h', 'shop', 'running', 0, 1, 3), (2, 0, 's', 'h', 'shop', 'running', 0, 2, 3), (3, 0, 's', 'h', 'mail', 'running', 0, 3, 3),
		(4, 0, 's', 'h', 'mail', 'ready', 0, 4, 3)`)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, `INSERT INTO tasks (id, namespace, workflow, version, state, input, priority, run_at, created_at, remaining, limit_key, limit_n)
		VALUES (1, 'shop', 'w', '1', 'running', '{}', 0, 0, 0, 1, 'workflow:shop/w', 5), (2, 'shop', 'w', '1', 'running', '{}', 0, 0, 0, 1, '', 0),
		(3, 'mail', 'w', '1', 'pending', '{}', 0, 0, 0, 1, 'workflow:mail/w', 5)`)
	require.NoError(t, err)
	type row struct {
		kind int
		name string
		n    int64
	}
	countsKnowing := func(known []int64) []row {
		rows, err := db.QueryContext(ctx, `SELECT limit_kind, limit_name, limit_n FROM weft_limit_room($1::text[], false, $2) ORDER BY 1, 2`,
			[]string{"mail", "shop"}, known)
		require.NoError(t, err)
		defer rows.Close()
		var out []row
		for rows.Next() {
			var r row
			require.NoError(t, rows.Scan(&r.kind, &r.name, &r.n))
			out = append(out, r)
		}
		require.NoError(t, rows.Err())
		return out
	}
	counts := func() []row { return countsKnowing(nil) }
	// Running steps of each namespace; running tasks under a workflow
	// limit (shop's task without one and mail's pending one are not); the
	// totals read with the counts.
	counted := []row{{0, "mail", 1}, {0, "shop", 2}, {4, "shop", 1}, {8, "mail", 0}, {8, "shop", 0}, {9, "mail", 0}, {9, "shop", 0}}
	require.Equal(t, counted, counts())

	// Known: mail not (-1), shop counted at 2 steps and 1 task with totals
	// of 10 and 4, a bound of at most 20 usable. Claims since added 5 steps
	// and 1 task to shop's totals: shop is bounded, not counted.
	_, err = db.ExecContext(ctx, `INSERT INTO limit_claims (namespace, steps, tasks) VALUES ('shop', 15, 5)`)
	require.NoError(t, err)
	require.Equal(t, []row{{0, "mail", 1}, {0, "shop", 7}, {4, "shop", 2}, {8, "mail", 0}, {9, "mail", 0}},
		countsKnowing([]int64{-1, 0, 0, 0, 0, 2, 1, 10, 4, 20}))
	require.Equal(t, []row{{0, "mail", 1}, {0, "shop", 2}, {4, "shop", 1}, {8, "mail", 0}, {8, "shop", 15}, {9, "mail", 0}, {9, "shop", 5}},
		countsKnowing([]int64{-1, 0, 0, 0, 0, 2, 1, 10, 4, 6}), "a bound past 6: counted")
	_, err = db.ExecContext(ctx, `DELETE FROM limit_claims`)
	require.NoError(t, err)

	holder, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = holder.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtext(current_schema() || '/weft-ns:shop'))`)
	require.NoError(t, err)
	require.Equal(t, []row{{-1, "shop", 0}, {0, "mail", 1}, {8, "mail", 0}, {9, "mail", 0}}, counts())
	require.NoError(t, holder.Rollback())
	require.Equal(t, counted, counts())
}

// TestLimitLocksArePerSchema: two installations in one database (two
// schemas) do not hold each other's limits back, though advisory locks
// are the database's.
func TestLimitLocksArePerSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a := openIsolated(t, time.Now, time.Minute).(postgres.Store)
	b := openIsolated(t, time.Now, time.Minute).(postgres.Store)
	holder, err := a.DB().BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback() }()
	_, err = holder.ExecContext(ctx, `SELECT count(*) FROM weft_limit_room('{shop}', true, NULL)`)
	require.NoError(t, err)
	missed := func(db *sql.DB) int {
		var n int
		require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM weft_limit_room('{shop}', false, NULL) WHERE limit_kind = -1`).Scan(&n))
		return n
	}
	require.Equal(t, 1, missed(a.DB()), "held in its own schema")
	require.Zero(t, missed(b.DB()), "free in the other")
}

// TestClaimAppliesThePoliciesOfWhatItSees: a claim that read the policies
// before a pause and sees, in its next statement, work made ready after
// it, claims under the pause. The claim is held between the two by the
// fair shares' lock, which its first statement takes while weights are
// set.
func TestClaimAppliesThePoliciesOfWhatItSees(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openIsolated(t, time.Now, time.Minute).(postgres.Store)
	_, err := s.SetPolicy(ctx, store.PolicyChange{Target: "other", Weight: ptr(2), Actor: "test"})
	require.NoError(t, err)
	_, err = s.ClaimSteps(ctx, store.ClaimParams{EngineID: "e1", Limit: 10}) // reads the weights
	require.NoError(t, err)

	holder, err := s.DB().BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback() }()
	_, err = holder.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtext(current_schema() || '/weft-fair'))`)
	require.NoError(t, err)
	type result struct {
		got []store.ClaimedStep
		err error
	}
	done := make(chan result, 1)
	go func() {
		got, err := s.ClaimSteps(ctx, store.ClaimParams{EngineID: "e1", Limit: 10})
		done <- result{got, err}
	}()
	// The claim waits for the lock in its first statement.
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, s.DB().QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'advisory' AND query LIKE '%policy_version%' AND datname = current_database()`).Scan(&n))
		return n > 0
	}, 10*time.Second, 5*time.Millisecond)
	_, err = s.SetPolicy(ctx, store.PolicyChange{Target: "shop", Paused: ptr(true), Actor: "test"})
	require.NoError(t, err)
	_, err = s.InsertTasks(ctx, []store.TaskInsert{{Namespace: "shop", Workflow: "wf", Version: "1",
		Steps: []store.StepInsert{{Name: "s", Handler: "h", MaxAttempts: 1}}}})
	require.NoError(t, err)
	require.NoError(t, holder.Rollback())
	r := <-done
	require.NoError(t, r.err)
	require.Empty(t, r.got, "shop was paused before its step became ready")
}

func ptr[T any](v T) *T { return &v }

// BenchmarkAttentionBacklog: see storetest.BenchmarkAttentionBacklog.
func BenchmarkAttentionBacklog(b *testing.B) {
	clock := storetest.NewClock()
	s := pgtesting.Open(b, postgres.Options{Clock: clock.Now, MaxConns: 4})
	storetest.BenchmarkAttentionBacklog(b, s, clock)
}

// BenchmarkGetTask: see storetest.BenchmarkGetTask.
func BenchmarkGetTask(b *testing.B) {
	storetest.BenchmarkGetTask(b, pgtesting.Open(b, postgres.Options{MaxConns: 4}))
}

// BenchmarkClaimSteps: see storetest.BenchmarkClaimSteps.
func BenchmarkClaimSteps(b *testing.B) {
	storetest.BenchmarkClaimSteps(b, func(tb testing.TB) store.Store {
		return pgtesting.Open(tb, postgres.Options{MaxConns: 4})
	})
}
