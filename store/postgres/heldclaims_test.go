package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/store/postgres"
)

// TestHeartbeatAuditsOnlyItsOwnClaim: a heartbeat that holds a run's fence
// while, in another transaction, that run ends and its step is claimed
// again audits nothing for the later claim. Matched by step id, the
// heartbeat's update rechecked the newer row and audited the later claim
// with the task start the earlier one made (read from its older
// snapshot): the task read as started twice.
func TestHeartbeatAuditsOnlyItsOwnClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openIsolated(t, time.Now, time.Minute).(postgres.Store)
	db := s.DB()
	require.NoError(t, s.RegisterEngine(ctx, store.EngineInfo{ID: "e1", Host: "test", StartedAt: time.Now()}))
	_, err := s.InsertTasks(ctx, []store.TaskInsert{{Namespace: "ns", Workflow: "w", Version: "1",
		Steps: []store.StepInsert{{Name: "a", Handler: "h", MaxAttempts: 3}}}})
	require.NoError(t, err)
	got, err := s.ClaimSteps(ctx, store.ClaimParams{EngineID: "e1", Limit: 1, Now: time.Now()})
	require.NoError(t, err)
	require.Len(t, got, 1)
	first := got[0]
	rows := func() int {
		var n int
		require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM audit WHERE task_id = $1`, first.TaskID).Scan(&n))
		return n
	}
	before := rows()

	// The run ends and the step is claimed again (attempt 2, another
	// lease, later), in a transaction that holds the step's row.
	again, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer again.Rollback()
	_, err = again.ExecContext(ctx, `UPDATE steps SET attempt = attempt + 1, lease_id = lease_id + 1, started_at = started_at + 70000,
		claim_audited = 0 WHERE id = $1`, first.Fence.StepID)
	require.NoError(t, err)
	var holder int
	require.NoError(t, again.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&holder))

	// The heartbeat reads the first run as running, then waits for the row.
	done := make(chan error, 1)
	go func() {
		_, err := s.Heartbeat(ctx, store.HeartbeatParams{EngineID: "e1", Now: time.Now(), Held: []store.Fence{first.Fence}})
		done <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var waiting bool
		require.NoError(t, db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE $1 = ANY(pg_blocking_pids(pid)) AND query LIKE '%SET claim_audited = 1%')`, holder).Scan(&waiting))
		if waiting {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("the heartbeat did not wait for the step's row: %v", err)
		default:
		}
		require.True(t, time.Now().Before(deadline), "the heartbeat never waited for the step's row")
		time.Sleep(5 * time.Millisecond)
	}
	require.NoError(t, again.Commit())
	require.NoError(t, <-done)
	require.Equal(t, before, rows(), "the heartbeat audited a claim that is not its holder's")
}
