package claim

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCandidatePolicies: each policy of the query of candidates adds the
// condition that skips what it holds back, with its arguments, and nothing
// where the claim has no policies or has met none.
func TestCandidatePolicies(t *testing.T) {
	t.Parallel()
	pol := &policySet{namespaces: []string{"off"}, workflows: [][2]string{{"ns", "wf"}},
		breakers: map[string]int64{"open": 1 << 60}}
	keys := newKeyRoom(pol, nil, 5)
	keys.ns = map[string]int{"full": 0, "room": 1}
	keys.step = map[nsKey]int{{ns: "a", key: "k"}: 0, {ns: "a", key: "free"}: 2}
	keys.task = map[nsKey]int{{ns: "a", key: "w"}: 0}
	keys.breakers = newBreakerRoom(pol, 100)
	for _, tc := range []struct {
		name   string
		policy candidatePolicy
		q      string
		args   []any
	}{
		{"pauses", pauses{}, ` AND namespace NOT IN (?) AND NOT (namespace = ? AND workflow = ?)`, []any{"off", "ns", "wf"}},
		{"namespace limits", namespaceLimits{}, ` AND namespace NOT IN (?)`, []any{"full"}},
		{"step keys", stepKeyLimits{}, ` AND limit_key NOT IN (?)`, []any{"k"}},
		{"breakers", breakerHolds{}, ` AND breaker_key NOT IN (?)`, []any{"open"}},
		{"workflow limits", workflowLimits{},
			` AND (task_limit_key NOT IN (?) OR task_id IN (SELECT id FROM tasks WHERE state = 'running' AND limit_key IN (?)))`, []any{"w", "w"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			q, args := tc.policy.exclude("", nil, pol, keys)
			require.Equal(t, tc.q, q)
			require.Equal(t, tc.args, args)
			q, args = tc.policy.exclude("", nil, nil, nil)
			require.Empty(t, q, "no policies")
			require.Empty(t, args)
		})
	}
}
