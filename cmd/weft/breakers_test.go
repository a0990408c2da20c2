package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/wire"
)

const flakyYAML = `namespace: shop
name: flaky
version: "1"
steps:
  - name: call
    handler: exec
    config: { command: ["sh", "-c", "exit 3"] }
    retry: { max_attempts: 1 }
    circuit_breaker: { failures: 2, cooldown: 1h }
`

func TestBreakerOpensAndResets(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "weft.db")
	flaky := writeFile(t, dir, "flaky.yaml", flakyYAML)
	requireCode(t, 0, weftCLI(t, "submit", flaky, "--db", db)) // task 1
	requireCode(t, 0, weftCLI(t, "submit", flaky, "--db", db)) // task 2

	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	worker := make(chan result, 1)
	go func() { worker <- weftIn(ctx, "", "worker", "--db", db, "--drain", "5s") }()
	require.Eventually(t, func() bool {
		return taskState(t.Context(), db, 1) == state.TaskFailed && taskState(t.Context(), db, 2) == state.TaskFailed
	}, 10*time.Second, 10*time.Millisecond)
	stop()
	requireCode(t, 0, <-worker)

	r := weftCLI(t, "policies", "--db", db)
	requireCode(t, 0, r)
	require.Regexp(t, `shop/flaky/call\s+open\s+2/2\s+\S+ \S+\s+\S+ \S+`, r.stdout)
	r = weftCLI(t, "policies", "--json", "--db", db)
	requireCode(t, 0, r)
	var rep wire.PolicyReport
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep), r.stdout)
	require.Len(t, rep.Breakers, 1)
	b := rep.Breakers[0]
	require.Equal(t, weft.BreakerOpen, b.State)
	require.Equal(t, 2, b.Failures)
	require.Equal(t, wire.Duration(time.Hour), b.Cooldown)
	require.Equal(t, b.OpenedAt.Add(time.Hour), *b.RetryAt)

	r = weftCLI(t, "breaker", "reset", "shop/flaky/call", "--reason", "provider back", "--db", db)
	requireCode(t, 0, r)
	require.Equal(t, "reset breaker shop/flaky/call: closed; its steps are claimed again\n", r.stdout)
	r = weftCLI(t, "policies", "--json", "--db", db)
	requireCode(t, 0, r)
	rep = wire.PolicyReport{}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep), r.stdout)
	require.Empty(t, rep.Breakers)
	r = weftCLI(t, "policies", "--history", "--json", "--db", db)
	requireCode(t, 0, r)
	var changes []wire.PolicyChangeRecord
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &changes), r.stdout)
	require.Len(t, changes, 1)
	require.Equal(t, "shop/flaky/call", changes[0].Target)
	require.Equal(t, "breaker reset (was open)", changes[0].Change)
	require.Equal(t, "provider back", changes[0].Reason)

	tests := []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"unknown breaker", []string{"breaker", "reset", "shop/flaky/other"}, 1, "not found"},
		{"not a step", []string{"breaker", "reset", "shop/flaky"}, 2, "want NAMESPACE/WORKFLOW/STEP"},
		{"no key", []string{"breaker", "reset"}, 2, "accepts 1 arg"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := weftCLI(t, append([]string{"--db", db}, tt.args...)...)
			requireCode(t, tt.code, r)
			require.Contains(t, r.stderr, tt.stderr)
		})
	}
}
