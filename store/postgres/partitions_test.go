package postgres_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/internal/pgtesting"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/store/postgres"
)

// partitionsOf returns the partition each audit row of a task is in.
func partitionsOf(t *testing.T, db *sql.DB, taskID int64) []string {
	t.Helper()
	rows, err := db.Query(`SELECT tableoid::regclass::text FROM audit WHERE task_id = $1 ORDER BY id`, taskID)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var p string
		require.NoError(t, rows.Scan(&p))
		out = append(out, p)
	}
	require.NoError(t, rows.Err())
	return out
}

// TestHistoryPartitions: the audit trail is written to the time partition
// of the database's clock; a roll creates the partitions ahead (taking in
// the rows that audit_default caught while none covered the clock) and
// drops those past the window, once the rows of the tasks still there have
// moved to audit_kept: their audit trail reads the same, and the rows of
// deleted tasks go with the partition. Retention's deletes leave a task's
// rows in a time partition to it; other deletes remove them.
func TestHistoryPartitions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := pgtesting.Open(t, postgres.Options{})
	db := s.DB()

	// The store's first open made the partitions of the next quarter hour.
	first := submitNow(t, s)
	require.Regexp(t, `^audit_p\d{8}t\d{6}_\d{8}t\d{6}$`, partitionsOf(t, db, first)[0])
	_, err := db.Exec(`DELETE FROM audit`)
	require.NoError(t, err)
	now, names, starts, err := postgres.Partitions(ctx, db)
	require.NoError(t, err)
	require.Len(t, starts, 3)
	require.False(t, starts[0].After(now), "the first covers the clock")
	require.True(t, starts[2].After(now.Add(5*time.Minute)), "two more ahead")
	for _, p := range names {
		_, err := db.Exec(`DROP TABLE ` + p)
		require.NoError(t, err)
	}

	// No time partition covers the clock: the row goes to audit_default.
	early := submitNow(t, s)
	require.Equal(t, []string{"audit_default"}, partitionsOf(t, db, early))

	roll, err := s.RollHistory(ctx, time.Hour)
	require.NoError(t, err)
	require.Len(t, roll.Created, 3, "the span the clock is in and two ahead (15 minutes each for an hour's window)")
	require.Empty(t, roll.Dropped)
	current := roll.Created[0]
	require.Equal(t, []string{current}, partitionsOf(t, db, early), "audit_default's row moved into the partition that covers it")
	again, err := s.RollHistory(ctx, time.Hour)
	require.NoError(t, err)
	require.Empty(t, again.Created, "the partitions ahead are there")

	kept, gone, retained, deleted := submitNow(t, s), submitNow(t, s), submitNow(t, s), submitNow(t, s)
	for _, id := range []int64{kept, gone, retained, deleted} {
		require.Equal(t, []string{current}, partitionsOf(t, db, id))
	}
	_, err = s.CancelTasks(ctx, []int64{gone, retained, deleted}, "e1", "done with")
	require.NoError(t, err)
	before, err := s.Audit(ctx, kept)
	require.NoError(t, err)
	require.NotEmpty(t, before)

	// Retention's delete leaves the rows to the partition; an operator's
	// removes them.
	rows := partitionsOf(t, db, retained)
	_, err = s.DeleteTasks(ctx, store.DeleteParams{IDs: []int64{retained}, Retention: true})
	require.NoError(t, err)
	require.Equal(t, rows, partitionsOf(t, db, retained))
	_, err = s.DeleteTasks(ctx, store.DeleteParams{IDs: []int64{deleted}, Actor: "cli:ops", Log: true})
	require.NoError(t, err)
	require.Empty(t, partitionsOf(t, db, deleted))

	// Move the rows into a partition of two days ago, which a window of an
	// hour has passed.
	require.NoError(t, db.QueryRow(`SELECT clock_timestamp()`).Scan(&now))
	lo := now.Add(-48 * time.Hour).UTC().Truncate(time.Hour)
	old := fmt.Sprintf("audit_p%s_%s", lo.Format("20060102t150405"), lo.Add(time.Hour).Format("20060102t150405"))
	_, err = db.Exec(fmt.Sprintf(`CREATE TABLE %s PARTITION OF audit FOR VALUES FROM ('%s') TO ('%s')`,
		old, lo.Format(time.RFC3339), lo.Add(time.Hour).Format(time.RFC3339)))
	require.NoError(t, err)
	_, err = db.Exec(`UPDATE audit SET part = $1 WHERE task_id = ANY($2)`, lo.Add(time.Minute), []int64{kept, gone, retained})
	require.NoError(t, err)
	keptRows := partitionsOf(t, db, kept)
	require.Equal(t, old, keptRows[0])

	_, err = s.DeleteTasks(ctx, store.DeleteParams{IDs: []int64{gone}, Retention: true})
	require.NoError(t, err)
	roll, err = s.RollHistory(ctx, time.Hour)
	require.NoError(t, err)
	require.Equal(t, []string{old}, roll.Dropped)
	require.EqualValues(t, len(keptRows), roll.Moved, "the kept task's rows")
	for _, p := range partitionsOf(t, db, kept) {
		require.Equal(t, "audit_kept", p)
	}
	after, err := s.Audit(ctx, kept)
	require.NoError(t, err)
	require.Equal(t, before, after)
	require.Empty(t, partitionsOf(t, db, gone), "went with the partition")
	require.Empty(t, partitionsOf(t, db, retained), "went with the partition")

	// A task in audit_kept goes whole with retention's delete.
	_, err = s.CancelTasks(ctx, []int64{kept}, "e1", "done with")
	require.NoError(t, err)
	_, err = s.DeleteTasks(ctx, store.DeleteParams{IDs: []int64{kept}, Retention: true})
	require.NoError(t, err)
	for _, p := range partitionsOf(t, db, kept) {
		require.Equal(t, current, p, "the cancellation's rows, written since, stay with their partition")
	}
}

// TestHistorySpan: a window spans about four partitions, from five minutes
// to a day each.
func TestHistorySpan(t *testing.T) {
	t.Parallel()
	for window, span := range map[time.Duration]time.Duration{
		time.Second:         5 * time.Minute,
		time.Hour:           15 * time.Minute,
		7 * time.Hour:       105 * time.Minute,
		30 * 24 * time.Hour: 24 * time.Hour,
	} {
		require.Equal(t, span, postgres.HistorySpan(window), "window %s", window)
	}
}
