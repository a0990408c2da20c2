package weft_test

import (
	"context"
	"log/slog"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/internal/pgtesting"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/store/postgres"
	"github.com/weftrun/weft/store/sqlite"
	"github.com/weftrun/weft/workflow"
)

// scheduledTicks returns the ticks of the tasks schedule name submitted,
// sorted, failing on a tick submitted twice.
func scheduledTicks(t *testing.T, e *weft.Engine, name string) []time.Time {
	t.Helper()
	tasks, err := e.List(context.Background(), weft.TaskFilter{Limit: 1000})
	require.NoError(t, err)
	var ticks []time.Time
	seen := map[time.Time]int64{}
	for _, task := range tasks {
		if task.Schedule != name {
			continue
		}
		require.NotNil(t, task.ScheduleTick, "task %d", task.ID)
		tick := task.ScheduleTick.UTC()
		require.NotContains(t, seen, tick, "tick %s submitted by tasks %d and %d", tick, seen[tick], task.ID)
		seen[tick] = task.ID
		ticks = append(ticks, tick)
	}
	sort.Slice(ticks, func(i, j int) bool { return ticks[i].Before(ticks[j]) })
	return ticks
}

// consecutive fails unless ticks are one second apart, none missing.
func consecutive(t *testing.T, ticks []time.Time) {
	t.Helper()
	for i := 1; i < len(ticks); i++ {
		require.Equal(t, time.Second, ticks[i].Sub(ticks[i-1]), "ticks %s and %s", ticks[i-1], ticks[i])
	}
}

// TestScheduleFires: a one-second schedule submits one task per tick,
// each marked with the schedule and its tick, and the tasks run.
func TestScheduleFires(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		e := newEngine(t, open(t), weft.Config{})
		e.Handle("tick", func(ctx context.Context, a *weft.Attempt) (any, error) { return "ok", nil })
		register(t, e, workflow.New("cron", "beat", "1").Step("s", "tick").
			Schedule("every-second", "@every 1s", workflow.ScheduleInput(map[string]int{"n": 1}), workflow.WithCatchUp(workflow.CatchUpAll, 10)))
		start(t, e)
		var ticks []time.Time
		eventually(t, "three ticks", func() bool {
			ticks = scheduledTicks(t, e, "every-second")
			return len(ticks) >= 3
		})
		consecutive(t, ticks)
		tasks, err := e.List(context.Background(), weft.TaskFilter{Limit: 1})
		require.NoError(t, err)
		task := wait(t, e, tasks[0].ID)
		require.Equal(t, "completed", string(task.State))
		require.JSONEq(t, `{"n":1}`, string(task.Input))

		list, err := e.Schedules(context.Background(), weft.ScheduleFilter{})
		require.NoError(t, err)
		require.Len(t, list, 1)
		require.NotNil(t, list[0].LastTick)
		require.True(t, list[0].NextTick.After(*list[0].LastTick))
	})
}

// TestScheduleTwoEngines: on PostgreSQL, two engines (each with its own
// connection pool, as two processes would have) run a one-second schedule
// for several seconds, the maintenance lease passing from one to the
// other halfway, and find exactly one task per tick, none missing.
func TestScheduleTwoEngines(t *testing.T) {
	t.Parallel()
	url := pgtesting.URL(t)
	ctx := context.Background()
	schema := pgtesting.SchemaName("sched")
	openStore := func() store.Store {
		s, err := postgres.Open(ctx, url, postgres.Options{Schema: schema, MaxConns: 4, Logger: slog.New(slog.DiscardHandler)})
		require.NoError(t, err)
		t.Cleanup(func() { s.Close() })
		return s
	}
	first := openStore()
	t.Cleanup(func() { _, _ = first.(postgres.Store).DB().ExecContext(ctx, `DROP SCHEMA `+schema+` CASCADE`) })
	cfg := weft.Config{LeaderTTL: 300 * time.Millisecond}
	engines := []*weft.Engine{newEngine(t, first, cfg), newEngine(t, openStore(), cfg)}
	for _, e := range engines {
		e.Handle("tick", func(ctx context.Context, a *weft.Attempt) (any, error) { return "ok", nil })
		register(t, e, workflow.New("cron", "beat", "1").Step("s", "tick").
			Schedule("every-second", "@every 1s", workflow.WithCatchUp(workflow.CatchUpAll, 10)))
		require.NoError(t, e.Start(ctx))
	}
	eventually(t, "three ticks", func() bool { return len(scheduledTicks(t, engines[0], "every-second")) >= 3 })
	// Stop the leader: the other takes the schedule over at once.
	leader := leaders(t, first)
	require.Len(t, leader, 1)
	stopCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	other := engines[1]
	for i, e := range engines {
		if e.ID() == leader[0] {
			require.NoError(t, e.Stop(stopCtx))
			other = engines[1-i]
		}
	}
	t.Cleanup(func() { _ = other.Stop(context.Background()) })
	eventually(t, "six ticks", func() bool { return len(scheduledTicks(t, other, "every-second")) >= 6 })
	ticks := scheduledTicks(t, other, "every-second")
	consecutive(t, ticks)
	// Both engines fired ticks: the submission's audit names the engine.
	tasks, err := other.List(ctx, weft.TaskFilter{Limit: 1000})
	require.NoError(t, err)
	firedBy := map[string]bool{}
	for _, task := range tasks {
		audit, err := other.Audit(ctx, task.ID)
		require.NoError(t, err)
		firedBy[audit[0].EngineID] = true
	}
	require.Len(t, firedBy, 2, "fired by %v", firedBy)
}

// TestScheduleThatNeverFires: a schedule whose cron names no time (as a
// database written before such were refused may hold, its next tick
// zero) is paused by the engine, which goes on firing its other
// schedules rather than spinning on it.
func TestScheduleThatNeverFires(t *testing.T) {
	t.Parallel()
	s := backends()["sqlite"](t)
	e := newEngine(t, s, weft.Config{})
	e.Handle("tick", func(ctx context.Context, a *weft.Attempt) (any, error) { return "ok", nil })
	register(t, e, workflow.New("cron", "beat", "1").Step("s", "tick").
		Schedule("every-second", "@every 1s").Schedule("never", "@daily"))
	_, err := s.(sqlite.Store).DB().ExecContext(context.Background(),
		`UPDATE schedules SET cron = '0 0 30 2 *', next_tick = 0 WHERE name = 'never'`)
	require.NoError(t, err)
	start(t, e)
	eventually(t, "the schedule that never fires to be paused", func() bool {
		list, err := e.Schedules(context.Background(), weft.ScheduleFilter{Name: "never"})
		require.NoError(t, err)
		return len(list) == 1 && list[0].Paused
	})
	eventually(t, "the other schedule to fire twice", func() bool {
		return len(scheduledTicks(t, e, "every-second")) >= 2
	})
}

// TestScheduleThatCannotSubmit: a schedule whose task cannot be submitted
// (its stored input lacks the key the workflow's concurrency limit is
// computed from, as one registered before such were refused may) is
// paused by the engine with why, not left active dropping every tick.
func TestScheduleThatCannotSubmit(t *testing.T) {
	t.Parallel()
	s := backends()["sqlite"](t)
	e := newEngine(t, s, weft.Config{})
	e.Handle("tick", func(ctx context.Context, a *weft.Attempt) (any, error) { return "ok", nil })
	register(t, e, workflow.New("cron", "keyed", "1").Step("s", "tick").WithConcurrency(1, "input.customer").
		Schedule("every-second", "@every 1s", workflow.ScheduleInput(map[string]string{"customer": "a"})))
	_, err := s.(sqlite.Store).DB().ExecContext(context.Background(), `UPDATE schedules SET input = '{}' WHERE name = 'every-second'`)
	require.NoError(t, err)
	start(t, e)
	eventually(t, "the schedule to be paused", func() bool {
		list, err := e.Schedules(context.Background(), weft.ScheduleFilter{Name: "every-second"})
		require.NoError(t, err)
		return len(list) == 1 && list[0].Paused
	})
	tasks, err := e.List(context.Background(), weft.TaskFilter{})
	require.NoError(t, err)
	require.Empty(t, tasks, "no task was submitted")
}
