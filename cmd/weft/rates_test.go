package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/wire"
)

// TestLimitRate: 'weft limit --rate' sets, shows and removes a namespace's
// rate; with a worker running, one step a hour of the namespace is claimed
// and the others wait, without using an attempt.
func TestLimitRate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "weft.db")
	checkout := writeFile(t, dir, "checkout.yaml", strings.ReplaceAll(pausedYAML, "%s", "checkout"))
	for range 3 {
		requireCode(t, 0, weftCLI(t, "submit", checkout, "--db", db))
	}

	r := weftCLI(t, "limit", "shop", "--rate", "1/h", "--db", db, "--reason", "slow provider")
	requireCode(t, 0, r)
	require.Equal(t, "shop: at most 1 claims per 1h0m0s, in bursts of up to 1 (1.0 tokens now)\n", r.stdout)

	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	worker := make(chan result, 1)
	go func() { worker <- weftIn(ctx, "", "worker", "--db", db, "--drain", "5s") }()
	completed := func() (n int) {
		for id := int64(1); id <= 3; id++ {
			if taskState(t.Context(), db, id) == state.TaskCompleted {
				n++
			}
		}
		return n
	}
	require.Eventually(t, func() bool { return completed() == 1 }, 10*time.Second, 10*time.Millisecond, "one token, one task")
	stop()
	requireCode(t, 0, <-worker)
	require.Equal(t, 1, completed(), "the others wait for the next token")
	waiting := 0
	for id := int64(1); id <= 3; id++ {
		r := weftCLI(t, "task", strconv.FormatInt(id, 10), "--json", "--db", db)
		requireCode(t, 0, r)
		var task wire.Task
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &task))
		if st := task.Steps[0]; st.State == state.StepWaiting {
			waiting++
			require.Zero(t, st.Attempts, "a deferral uses no attempt")
		}
	}
	require.Equal(t, 2, waiting)

	r = weftCLI(t, "policies", "--db", db)
	requireCode(t, 0, r)
	require.Regexp(t, `RATE\s+LIMIT\s+TOKENS\s+DEFERRED UNTIL\nshop\s+1/h\s+0\.0\s+-`, r.stdout)
	r = weftCLI(t, "policies", "--json", "--db", db)
	requireCode(t, 0, r)
	var rep wire.PolicyReport
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep), r.stdout)
	require.Len(t, rep.Policies, 1)
	require.Equal(t, &weft.Rate{Limit: 1, Per: time.Hour}, rep.Policies[0].Rate)
	r = weftCLI(t, "policies", "--history", "--json", "--db", db)
	requireCode(t, 0, r)
	var changes []wire.PolicyChangeRecord
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &changes), r.stdout)
	require.Equal(t, "rate=1/h", changes[0].Change)
	require.Equal(t, "slow provider", changes[0].Reason)

	r = weftCLI(t, "limit", "shop", "--rate", "50/s", "--concurrency", "4", "--db", db)
	requireCode(t, 0, r)
	// The bucket keeps its whole tokens (none) and refills at the new rate.
	require.Regexp(t, `^shop: at most 4 steps at once \(0 running\)\nshop: at most 50 claims per 1s, in bursts of up to 50 \([0-9.]+ tokens now\)\n$`, r.stdout)
	r = weftCLI(t, "limit", "shop", "--rate", "off", "--db", db)
	requireCode(t, 0, r)
	require.Equal(t, "shop: no rate limit\n", r.stdout)

	tests := []struct {
		name   string
		args   []string
		stderr string
	}{
		{"no flag", []string{"limit", "shop"}, "--rate LIMIT/PER"},
		{"not a rate", []string{"limit", "shop", "--rate", "fast"}, "--rate: \"fast\": want LIMIT/PER"},
		{"no limit", []string{"limit", "shop", "--rate", "/s"}, "is not a whole number"},
		{"zero limit", []string{"limit", "shop", "--rate", "0/s"}, "the limit must be from 1 to 1000000, got 0"},
		{"bad period", []string{"limit", "shop", "--rate", "5/week"}, "the period \"week\" is not s, m, h or a duration"},
		{"long period", []string{"limit", "shop", "--rate", "5/48h"}, "the period must be from 1ms to 24h0m0s"},
		{"a workflow", []string{"limit", "shop/checkout", "--rate", "1/s"}, "set on a namespace"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := weftCLI(t, append([]string{"--db", db}, tt.args...)...)
			requireCode(t, 2, r)
			require.Contains(t, r.stderr, tt.stderr)
		})
	}
}
