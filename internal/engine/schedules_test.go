package engine

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/store/sqlite"
	"github.com/weftrun/weft/workflow"
)

// TestScheduleCatchUp: an engine that starts after a gap (here, one whose
// clock is 5h30m past the registration of an hourly schedule) follows the
// schedule's catch-up policy, fires nothing twice when asked again, and
// moves the schedule to its next tick.
func TestScheduleCatchUp(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name   string
		policy workflow.CatchUp
		max    int
		ticks  []time.Duration // after t0
	}{
		{"skip", workflow.CatchUpSkip, 0, nil},
		{"latest", workflow.CatchUpLatest, 0, []time.Duration{5 * time.Hour}},
		{"all bounded", workflow.CatchUpAll, 3, []time.Duration{3 * time.Hour, 4 * time.Hour, 5 * time.Hour}},
		{"all", workflow.CatchUpAll, 10, []time.Duration{0, time.Hour, 2 * time.Hour, 3 * time.Hour, 4 * time.Hour, 5 * time.Hour}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "weft.db"), sqlite.Options{})
			require.NoError(t, err)
			t.Cleanup(func() { s.Close() })
			open := func(now time.Time) *Engine {
				e, err := New(s, Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
				require.NoError(t, err)
				e.clock = func() time.Time { return now }
				return e
			}
			w := workflow.New("ops", "report", "1").Step("run", "noop").
				Schedule("hourly", "@hourly", workflow.ScheduleInput(map[string]any{"full": true}), workflow.WithCatchUp(tc.policy, tc.max))
			first := open(t0.Add(-30 * time.Minute))
			_, _, err = first.defs.Register(ctx, w)
			require.NoError(t, err)

			// The engine comes back 5h30m later.
			now := t0.Add(5*time.Hour + 30*time.Minute)
			later := open(now)
			for range 2 { // the second round finds nothing due
				require.NoError(t, later.schedules.fire(ctx, now))
			}
			tasks, err := s.ListTasks(ctx, store.TaskFilter{})
			require.NoError(t, err)
			var got []time.Duration
			for i := len(tasks) - 1; i >= 0; i-- { // oldest first
				task := tasks[i]
				require.Equal(t, "hourly", task.Schedule)
				require.JSONEq(t, `{"full":true}`, string(task.Input))
				got = append(got, task.ScheduleTick.Sub(t0))
			}
			require.Equal(t, tc.ticks, got)
			list, err := later.admin.Schedules(ctx, store.ScheduleFilter{})
			require.NoError(t, err)
			require.Len(t, list, 1)
			require.True(t, t0.Add(6*time.Hour).Equal(list[0].NextTick), "next tick %v", list[0].NextTick)
		})
	}
}

// TestSchedulePauseSkipsTicks: a resumed schedule starts from its next
// tick after the resumption; what passed while it was paused is not caught
// up, whatever its policy.
func TestSchedulePauseSkipsTicks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "weft.db"), sqlite.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	e, err := New(s, Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	t0 := time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)
	now := t0.Add(-time.Minute)
	e.clock = func() time.Time { return now }
	w := workflow.New("ops", "report", "1").Step("run", "noop").Schedule("hourly", "@hourly", workflow.WithCatchUp(workflow.CatchUpAll, 10))
	_, _, err = e.defs.Register(ctx, w)
	require.NoError(t, err)
	k := store.ScheduleKey{Namespace: "ops", Workflow: "report", Name: "hourly"}
	rec, err := e.admin.PauseSchedule(ctx, k, true, "test", "quiet")
	require.NoError(t, err)
	require.True(t, rec.Paused)
	now = t0.Add(3*time.Hour + 10*time.Minute)
	require.NoError(t, e.schedules.fire(ctx, now))
	rec, err = e.admin.PauseSchedule(ctx, k, false, "test", "")
	require.NoError(t, err)
	require.True(t, t0.Add(4*time.Hour).Equal(rec.NextTick))
	require.NoError(t, e.schedules.fire(ctx, now))
	tasks, err := s.ListTasks(ctx, store.TaskFilter{})
	require.NoError(t, err)
	require.Empty(t, tasks)

	found, err := e.admin.FindSchedule(ctx, "hourly")
	require.NoError(t, err)
	require.Equal(t, k, found.ScheduleKey)
	_, err = e.admin.FindSchedule(ctx, "ops/report/hourly")
	require.NoError(t, err)
	for _, bad := range []string{"", "ops/hourly", "/report/hourly"} {
		_, err = e.admin.FindSchedule(ctx, bad)
		require.ErrorIs(t, err, store.ErrInvalid, bad)
	}
	_, err = e.admin.FindSchedule(ctx, "nope")
	require.ErrorIs(t, err, store.ErrNotFound)
}

// TestScheduleWithoutWorkflow: a schedule whose workflow version cannot be
// found is paused, with why, instead of failing every maintenance round
// or dropping every tick while it reads active.
func TestScheduleWithoutWorkflow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "weft.db"), sqlite.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	e, err := New(s, Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	t0 := time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)
	_, err = s.SyncSchedules(ctx, "ops", "ghost", "1", []store.ScheduleRecord{{ScheduleKey: store.ScheduleKey{Name: "hourly"},
		Cron: "@hourly", CatchUp: "all", MaxCatchUp: 10, NextTick: t0}})
	require.NoError(t, err)
	require.NoError(t, e.schedules.fire(ctx, t0.Add(90*time.Minute)))
	list, err := s.ListSchedules(ctx, store.ScheduleFilter{})
	require.NoError(t, err)
	require.True(t, list[0].Paused, "paused")
	require.Nil(t, list[0].LastTick)
	require.NoError(t, e.schedules.fire(ctx, t0.Add(3*time.Hour)), "a paused schedule is not due")
	tasks, err := s.ListTasks(ctx, store.TaskFilter{})
	require.NoError(t, err)
	require.Empty(t, tasks)
}
