package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/wire"
)

const pausedYAML = `namespace: shop
name: %s
version: "1"
steps:
  - name: s
    handler: exec
    config: { command: ["true"] }
`

func TestPauseResumeWithWorker(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "weft.db")
	checkout := writeFile(t, dir, "checkout.yaml", strings.ReplaceAll(pausedYAML, "%s", "checkout"))
	refund := writeFile(t, dir, "refund.yaml", strings.ReplaceAll(pausedYAML, "%s", "refund"))
	requireCode(t, 0, weftCLI(t, "submit", checkout, "--db", db)) // task 1
	requireCode(t, 0, weftCLI(t, "submit", refund, "--db", db))   // task 2

	r := weftCLI(t, "pause", "shop/checkout", "--db", db, "--reason", "bad deploy")
	requireCode(t, 0, r)
	require.Contains(t, r.stdout, "paused shop/checkout")

	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	worker := make(chan result, 1)
	go func() { worker <- weftIn(ctx, "", "worker", "--db", db, "--drain", "5s") }()
	require.Eventually(t, func() bool { return taskState(t.Context(), db, 2) == state.TaskCompleted },
		10*time.Second, 10*time.Millisecond, "the workflow not paused runs")
	require.Equal(t, state.TaskPending, taskState(t.Context(), db, 1), "the paused workflow waits")

	r = weftCLI(t, "policies", "--db", db)
	requireCode(t, 0, r)
	require.Regexp(t, `shop/checkout\s+yes\s+-\s+-\s+-\s+\S+ \S+\s+cli:`, r.stdout)

	requireCode(t, 0, weftCLI(t, "resume", "shop/checkout", "--db", db))
	require.Eventually(t, func() bool { return taskState(t.Context(), db, 1) == state.TaskCompleted },
		10*time.Second, 10*time.Millisecond, "the resumed workflow runs")
	stop()
	requireCode(t, 0, <-worker)

	r = weftCLI(t, "policies", "--history", "--json", "--db", db)
	requireCode(t, 0, r)
	var changes []wire.PolicyChangeRecord
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &changes), r.stdout)
	require.Len(t, changes, 2)
	require.Equal(t, "resume", changes[0].Change)
	require.Equal(t, "pause", changes[1].Change)
	require.Equal(t, "bad deploy", changes[1].Reason)
	require.True(t, strings.HasPrefix(changes[1].Actor, "cli:"), changes[1].Actor)
}

func TestLimitAndPolicies(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "weft.db")
	registerWorkflows(t, db, "shop/checkout")

	r := weftCLI(t, "policies", "--db", db)
	requireCode(t, 0, r)
	require.Contains(t, r.stdout, "no policies set")

	r = weftCLI(t, "limit", "shop", "--concurrency", "4", "--db", db)
	requireCode(t, 0, r)
	require.Equal(t, "shop: at most 4 steps at once (0 running)\n", r.stdout)
	requireCode(t, 0, weftCLI(t, "pause", "--all", "--db", db))

	r = weftCLI(t, "policies", "--json", "--db", db)
	requireCode(t, 0, r)
	var rep wire.PolicyReport
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep), r.stdout)
	require.Len(t, rep.Policies, 2)
	require.Equal(t, "*", rep.Policies[0].Target)
	require.True(t, rep.Policies[0].Paused)
	require.Equal(t, "shop", rep.Policies[1].Target)
	require.Equal(t, 4, rep.Policies[1].Concurrency)

	r = weftCLI(t, "limit", "shop", "--concurrency", "0", "--db", db)
	requireCode(t, 0, r)
	require.Equal(t, "shop: no concurrency limit\n", r.stdout)

	tests := []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"pause without target", []string{"pause"}, 2, "give a TARGET"},
		{"pause target and all", []string{"pause", "shop", "--all"}, 2, "not both"},
		{"pause star", []string{"pause", "*"}, 2, "use --all"},
		{"pause version", []string{"pause", "shop/checkout@1"}, 2, "no version"},
		{"pause bad name", []string{"pause", "sh op"}, 2, "letters, digits"},
		{"pause empty workflow", []string{"pause", "shop/"}, 2, "want NAMESPACE, NAMESPACE/WORKFLOW"},
		{"limit without flag", []string{"limit", "shop"}, 2, "give --concurrency N"},
		{"limit negative", []string{"limit", "shop", "--concurrency", "-1"}, 2, "0 (no limit) or more"},
		{"limit above what stores hold", []string{"limit", "shop", "--concurrency", "2147483648"}, 2, "at most 2147483647"},
		{"weight above the most", []string{"limit", "shop", "--weight", "1001"}, 2, "from 1 to 1000"},
		{"limit a workflow", []string{"limit", "shop/checkout", "--concurrency", "1"}, 2, "set on a namespace"},
		{"policies bad limit", []string{"policies", "--history", "--limit", "0"}, 2, "--limit must be from 1 to 1000"},
		{"no database", []string{"policies", "--db", filepath.Join(dir, "none.db")}, 1, "no database at"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := weftCLI(t, append([]string{"--db", db}, tt.args...)...) // a --db in args wins
			requireCode(t, tt.code, r)
			require.Contains(t, r.stderr, tt.stderr)
			require.NotContains(t, r.stderr, "weft: weft:", "one prefix")
		})
	}
}

func TestLimitWeight(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "weft.db")
	registerWorkflows(t, db, "shop/checkout", "other")

	r := weftCLI(t, "limit", "shop", "--weight", "3", "--reason", "black friday", "--db", db)
	requireCode(t, 0, r)
	require.Equal(t, "shop: weight 3 in the fair shares (0 running)\n", r.stdout)
	r = weftCLI(t, "limit", "other", "--concurrency", "5", "--weight", "2", "--db", db)
	requireCode(t, 0, r)
	require.Equal(t, "other: at most 5 steps at once (0 running)\nother: weight 2 in the fair shares (0 running)\n", r.stdout)
	requireCode(t, 0, weftCLI(t, "pause", "shop/checkout", "--db", db))

	r = weftCLI(t, "policies", "--db", db)
	requireCode(t, 0, r)
	require.Regexp(t, `TARGET\s+PAUSED\s+CONCURRENCY\s+WEIGHT\s+RUNNING`, r.stdout)
	require.Regexp(t, `\nother\s+no\s+5\s+2\s+0\s`, r.stdout)
	require.Regexp(t, `\nshop\s+no\s+-\s+3\s+0\s`, r.stdout)
	require.Regexp(t, `\nshop/checkout\s+yes\s+-\s+-\s+-\s`, r.stdout, "a workflow has no weight")

	r = weftCLI(t, "policies", "--json", "--db", db)
	requireCode(t, 0, r)
	var rep wire.PolicyReport
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep), r.stdout)
	require.Len(t, rep.Policies, 3)
	require.Equal(t, 3, rep.Policies[1].Weight)

	r = weftCLI(t, "limit", "shop", "--weight", "1", "--db", db)
	requireCode(t, 0, r)
	require.Equal(t, "shop: weight 1 (the default)\n", r.stdout)
	r = weftCLI(t, "policies", "--history", "--json", "--db", db)
	requireCode(t, 0, r)
	var changes []wire.PolicyChangeRecord
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &changes), r.stdout)
	require.Equal(t, "weight=1", changes[0].Change)
	require.Equal(t, "concurrency=5 weight=2", changes[2].Change)
	require.Equal(t, "weight=3", changes[3].Change)
	require.Equal(t, "black friday", changes[3].Reason)

	for _, tt := range []struct {
		name   string
		args   []string
		stderr string
	}{
		{"negative", []string{"limit", "shop", "--weight", "-1"}, "--weight: must be from 1 to 1000"},
		{"too big", []string{"limit", "shop", "--weight", "1001"}, "--weight: must be from 1 to 1000"},
		{"not a number", []string{"limit", "shop", "--weight", "x"}, "--weight"},
		{"a workflow", []string{"limit", "shop/checkout", "--weight", "2"}, "set on a namespace"},
		{"all work", []string{"limit", "*", "--weight", "2"}, "set on a namespace"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := weftCLI(t, append([]string{"--db", db}, tt.args...)...)
			requireCode(t, 2, r)
			require.Contains(t, r.stderr, tt.stderr)
		})
	}
}
