package sqlite_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/store/storetest"
)

// TestSubmitStoresStepColumnsAsGiven: SQLite's store writes the columns a
// step takes from its workflow version into its statement's text, as
// literals; each is stored as given, a text with a NUL byte too, whichever
// way its task went in (alone, among many without keys, with a key).
func TestSubmitStoresStepColumnsAsGiven(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStore(t)
	steps := storetest.OddSteps()
	steps[0].Name += "\x00after a NUL"
	steps[1].Handler += "\x00"
	steps[2].MaxAttempts, steps[2].TTL, steps[2].Timeout, steps[2].Priority, steps[2].Preemptible = 7, time.Hour, time.Minute, -3, true
	steps[3].TriggerRule = "all_done"
	steps[len(steps)-1].SignalTimeout = 90 * time.Second
	task := func(key string) store.TaskInsert {
		return store.TaskInsert{Namespace: "ns 'x'", Workflow: "wf 'x' ?", Version: "1", Steps: steps, IdempotencyKey: key, LimitKey: "task 'limit'", Limit: 2}
	}
	alone, err := s.InsertTasks(ctx, []store.TaskInsert{task("")})
	require.NoError(t, err)
	many, err := s.InsertTasks(ctx, []store.TaskInsert{task(""), task(""), task("key '?'"), task("")})
	require.NoError(t, err)
	for i, r := range append(alone, many...) {
		rows, err := s.DB().QueryContext(ctx, `SELECT idx, name, handler, namespace, workflow, kind, trigger_rule, signal, limit_key, limit_n,
			task_limit_key, task_limit_n, rate_key, rate_n, rate_per, breaker_key, breaker_n, breaker_cooldown, max_attempts, ttl,
			wait_timeout, run_timeout, priority, preemptible FROM steps WHERE task_id = ? ORDER BY idx`, r.Task.ID)
		require.NoError(t, err)
		j := 0
		for ; rows.Next(); j++ {
			var idx, limitN, taskLimitN, rateN, ratePer, breakerN, cooldown, maxAttempts, ttl, waitTimeout, runTimeout, prio, preemptible int64
			var name, handler, ns, wf, kind, rule, signal, limitKey, taskLimitKey, rateKey, breakerKey string
			require.NoError(t, rows.Scan(&idx, &name, &handler, &ns, &wf, &kind, &rule, &signal, &limitKey, &limitN, &taskLimitKey, &taskLimitN,
				&rateKey, &rateN, &ratePer, &breakerKey, &breakerN, &cooldown, &maxAttempts, &ttl, &waitTimeout, &runTimeout, &prio, &preemptible))
			want := steps[j]
			var bk string
			var bn, bc int64
			if want.Breaker != nil {
				bk, bn, bc = want.Breaker.Key, int64(want.Breaker.Failures), want.Breaker.Cooldown.Microseconds()
			}
			maxWant := int64(max(want.MaxAttempts, 1))
			require.Equal(t,
				[]any{int64(j), want.Name, want.Handler, "ns 'x'", "wf 'x' ?", want.Kind, want.TriggerRule, want.Signal, want.LimitKey, int64(want.Limit),
					"task 'limit'", int64(2), want.RateKey, int64(want.Rate.Limit), want.Rate.Per.Microseconds(), bk, bn, bc, maxWant, want.TTL.Microseconds(),
					want.SignalTimeout.Microseconds(), want.Timeout.Microseconds(), int64(want.Priority), int64(map[bool]int{true: 1}[want.Preemptible])},
				[]any{idx, name, handler, ns, wf, kind, rule, signal, limitKey, limitN, taskLimitKey, taskLimitN, rateKey, rateN, ratePer, breakerKey,
					breakerN, cooldown, maxAttempts, ttl, waitTimeout, runTimeout, prio, preemptible},
				"task %d step %d", i, j)
		}
		require.NoError(t, rows.Err())
		require.Equal(t, len(steps), j, "task %d", i)
	}
}
