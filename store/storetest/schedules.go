package storetest

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/store"
)

// Schedules: registration with a workflow version, due schedules, firing a
// tick once however many engines try, pause and resume.

var scheduleTests = []struct {
	name string
	fn   func(t *testing.T, h *harness)
}{
	{"SchedulesSync", testSchedulesSync},
	{"SchedulesOlderVersionIgnored", testSchedulesOlderVersion},
	{"ScheduleFireOnce", testScheduleFireOnce},
	{"ScheduleFireConcurrent", testScheduleFireConcurrent},
	{"SchedulePauseResume", testSchedulePause},
	{"ScheduleNextWake", testScheduleNextWake},
}

var nightlyKey = store.ScheduleKey{Namespace: "ns", Workflow: "wf", Name: "nightly"}

func (h *harness) syncSchedules(version string, scheds ...store.ScheduleRecord) bool {
	h.t.Helper()
	changed, err := h.s.SyncSchedules(h.ctx, "ns", "wf", version, scheds)
	require.NoError(h.t, err)
	return changed
}

func (h *harness) schedules() map[string]store.ScheduleRecord {
	h.t.Helper()
	list, err := h.s.ListSchedules(h.ctx, store.ScheduleFilter{Namespace: "ns", Workflow: "wf"})
	require.NoError(h.t, err)
	out := map[string]store.ScheduleRecord{}
	for _, s := range list {
		out[s.Name] = s
	}
	return out
}

func sched(name, cron string, next time.Time) store.ScheduleRecord {
	return store.ScheduleRecord{ScheduleKey: store.ScheduleKey{Name: name}, Cron: cron, Input: json.RawMessage(`{"n":1}`),
		CatchUp: "skip", MaxCatchUp: 10, NextTick: next}
}

// tickTask is the task a schedule submits for one tick.
func tickTask(k store.ScheduleKey, tick time.Time) store.TaskInsert {
	return store.TaskInsert{Namespace: k.Namespace, Workflow: k.Workflow, Version: "1", Steps: chain("only"),
		IdempotencyKey: fmt.Sprintf("schedule:%s@%d", k.Name, tick.UnixMicro())}
}

func testSchedulesSync(t *testing.T, h *harness) {
	t0 := h.clock.Now().Truncate(time.Minute).Add(time.Minute)
	require.True(t, h.syncSchedules("1", sched("nightly", "0 3 * * *", t0), sched("hourly", "@hourly", t0)))
	require.False(t, h.syncSchedules("1", sched("nightly", "0 3 * * *", t0.Add(time.Hour)), sched("hourly", "@hourly", t0)),
		"the same definition again changes nothing, not even the next tick")
	got := h.schedules()
	require.Len(t, got, 2)
	n := got["nightly"]
	require.Equal(t, "1", n.Version)
	require.Equal(t, "0 3 * * *", n.Cron)
	require.JSONEq(t, `{"n":1}`, string(n.Input))
	require.Equal(t, "skip", n.CatchUp)
	require.Equal(t, 10, n.MaxCatchUp)
	require.False(t, n.Paused)
	require.Nil(t, n.LastTick)
	require.True(t, t0.Equal(n.NextTick))

	// Version 2 drops hourly, changes nightly's input (keeping its next
	// tick) and adds weekly.
	changed := sched("nightly", "0 3 * * *", t0.Add(time.Hour))
	changed.Input = json.RawMessage(`{"n":2}`)
	require.True(t, h.syncSchedules("2", changed, sched("weekly", "@weekly", t0)))
	got = h.schedules()
	require.Len(t, got, 2)
	require.Equal(t, "2", got["nightly"].Version)
	require.JSONEq(t, `{"n":2}`, string(got["nightly"].Input))
	require.True(t, t0.Equal(got["nightly"].NextTick), "input changed, cron did not: the next tick stays")
	require.Contains(t, got, "weekly")

	// A new cron expression takes the next tick computed for it.
	require.True(t, h.syncSchedules("2", sched("nightly", "0 4 * * *", t0.Add(2*time.Hour)), sched("weekly", "@weekly", t0)))
	require.True(t, t0.Add(2*time.Hour).Equal(h.schedules()["nightly"].NextTick))

	// Filters.
	one, err := h.s.ListSchedules(h.ctx, store.ScheduleFilter{Name: "weekly"})
	require.NoError(t, err)
	require.Len(t, one, 1)
	none, err := h.s.ListSchedules(h.ctx, store.ScheduleFilter{Namespace: "other"})
	require.NoError(t, err)
	require.Empty(t, none)

	// A version with no schedules removes them.
	require.True(t, h.syncSchedules("3"))
	require.Empty(t, h.schedules())
}

func testSchedulesOlderVersion(t *testing.T, h *harness) {
	t0 := h.clock.Now()
	h.syncSchedules("1.10", sched("nightly", "0 3 * * *", t0))
	require.False(t, h.syncSchedules("1.9", sched("other", "@hourly", t0)), "1.9 is older than 1.10")
	got := h.schedules()
	require.Len(t, got, 1)
	require.Equal(t, "1.10", got["nightly"].Version)

	// A newer registered version without schedules has none: an older one
	// registered again does not bring its own back.
	for _, v := range []string{"1.10", "2"} {
		_, _, err := h.s.PutWorkflow(h.ctx, store.WorkflowRecord{Namespace: "ns", Name: "wf", Version: v, Definition: json.RawMessage(`{"v":"` + v + `"}`)})
		require.NoError(t, err)
	}
	require.True(t, h.syncSchedules("2"))
	require.False(t, h.syncSchedules("1.10", sched("nightly", "0 3 * * *", t0)))
	require.Empty(t, h.schedules())
}

func testScheduleFireOnce(t *testing.T, h *harness) {
	t0 := h.clock.Now().Truncate(time.Second)
	h.syncSchedules("1", sched("nightly", "@every 1s", t0))
	due, err := h.s.DueSchedules(h.ctx, t0.Add(-time.Millisecond), 10)
	require.NoError(t, err)
	require.Empty(t, due, "not due before its tick")
	due, err = h.s.DueSchedules(h.ctx, t0, 10)
	require.NoError(t, err)
	require.Len(t, due, 1)
	require.Equal(t, nightlyKey, due[0].ScheduleKey)

	ticks := []time.Time{t0, t0.Add(time.Second)}
	fire := store.ScheduleFire{Key: nightlyKey, Expect: t0, Next: t0.Add(2 * time.Second), Ticks: ticks,
		Tasks: []store.TaskInsert{tickTask(nightlyKey, ticks[0]), tickTask(nightlyKey, ticks[1])}, EngineID: "e1"}
	res, err := h.s.FireSchedule(h.ctx, fire)
	require.NoError(t, err)
	require.Len(t, res, 2)
	for i, r := range res {
		require.False(t, r.Duplicate)
		task := h.task(r.Task.ID)
		require.Equal(t, "nightly", task.Schedule)
		require.NotNil(t, task.ScheduleTick)
		require.True(t, ticks[i].Equal(*task.ScheduleTick), "task %d: tick %v", i, task.ScheduleTick)
	}
	// Lists filter by the schedule that submitted the tasks.
	h.insert(store.TaskInsert{Namespace: nightlyKey.Namespace, Workflow: nightlyKey.Workflow, Version: "1"})
	bySchedule, err := h.s.ListTasks(h.ctx, store.TaskFilter{Namespace: nightlyKey.Namespace, Workflow: nightlyKey.Workflow, Schedule: "nightly"})
	require.NoError(t, err)
	require.Len(t, bySchedule, 2, "the task submitted by hand is not the schedule's")
	none, err := h.s.ListTasks(h.ctx, store.TaskFilter{Schedule: "hourly"})
	require.NoError(t, err)
	require.Empty(t, none)
	got := h.schedules()["nightly"]
	require.True(t, ticks[1].Equal(*got.LastTick))
	require.True(t, t0.Add(2*time.Second).Equal(got.NextTick))

	// The same fire again (a second engine that read the same next tick)
	// is refused and inserts nothing.
	_, err = h.s.FireSchedule(h.ctx, fire)
	require.ErrorIs(t, err, store.ErrConflict)
	tasks, err := h.s.ListTasks(h.ctx, store.TaskFilter{Schedule: "nightly"})
	require.NoError(t, err)
	require.Len(t, tasks, 2)

	// A tick whose task exists (the key) is not inserted twice even when
	// the compare-and-swap passes.
	again := store.ScheduleFire{Key: nightlyKey, Expect: t0.Add(2 * time.Second), Next: t0.Add(3 * time.Second),
		Ticks: ticks[1:], Tasks: []store.TaskInsert{tickTask(nightlyKey, ticks[1])}, EngineID: "e1"}
	res, err = h.s.FireSchedule(h.ctx, again)
	require.NoError(t, err)
	require.True(t, res[0].Duplicate)

	// Skipping ticks fires nothing and keeps the last tick.
	skip := store.ScheduleFire{Key: nightlyKey, Expect: t0.Add(3 * time.Second), Next: t0.Add(10 * time.Second), EngineID: "e1"}
	_, err = h.s.FireSchedule(h.ctx, skip)
	require.NoError(t, err)
	got = h.schedules()["nightly"]
	require.True(t, ticks[1].Equal(*got.LastTick))
	require.True(t, t0.Add(10*time.Second).Equal(got.NextTick))

	_, err = h.s.FireSchedule(h.ctx, store.ScheduleFire{Key: nightlyKey, Expect: t0, Next: t0, Ticks: ticks})
	require.ErrorIs(t, err, store.ErrInvalid, "ticks and tasks must pair")
}

// testScheduleFireConcurrent: engines racing to fire the same tick
// submit one task.
func testScheduleFireConcurrent(t *testing.T, h *harness) {
	t0 := h.clock.Now().Truncate(time.Second)
	h.syncSchedules("1", sched("nightly", "@every 1s", t0))
	const racers = 4
	var wg sync.WaitGroup
	errs := make([]error, racers)
	for i := range racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = h.s.FireSchedule(h.ctx, store.ScheduleFire{Key: nightlyKey, Expect: t0, Next: t0.Add(time.Second),
				Ticks: []time.Time{t0}, Tasks: []store.TaskInsert{tickTask(nightlyKey, t0)}, EngineID: fmt.Sprintf("e%d", i)})
		}()
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		if err == nil {
			won++
		} else {
			require.ErrorIs(t, err, store.ErrConflict)
		}
	}
	require.Equal(t, 1, won)
	tasks, err := h.s.ListTasks(h.ctx, store.TaskFilter{})
	require.NoError(t, err)
	require.Len(t, tasks, 1)
}

func testSchedulePause(t *testing.T, h *harness) {
	t0 := h.clock.Now().Truncate(time.Second)
	h.syncSchedules("1", sched("nightly", "@every 1s", t0))
	rec, err := h.s.PauseSchedule(h.ctx, store.SchedulePause{Key: nightlyKey, Paused: true, Actor: "cli:ada", Reason: "maintenance window"})
	require.NoError(t, err)
	require.True(t, rec.Paused)
	due, err := h.s.DueSchedules(h.ctx, t0.Add(time.Hour), 10)
	require.NoError(t, err)
	require.Empty(t, due, "a paused schedule is never due")
	_, err = h.s.FireSchedule(h.ctx, store.ScheduleFire{Key: nightlyKey, Expect: t0, Next: t0.Add(time.Second)})
	require.ErrorIs(t, err, store.ErrConflict, "a paused schedule is not fired")

	// Pausing again records nothing.
	_, err = h.s.PauseSchedule(h.ctx, store.SchedulePause{Key: nightlyKey, Paused: true, Actor: "cli:bob"})
	require.NoError(t, err)

	resume := t0.Add(time.Hour)
	rec, err = h.s.PauseSchedule(h.ctx, store.SchedulePause{Key: nightlyKey, Paused: false, Next: resume, Actor: "api:ops"})
	require.NoError(t, err)
	require.False(t, rec.Paused)
	require.True(t, resume.Equal(rec.NextTick), "ticks missed while paused are not caught up")
	require.True(t, resume.Equal(h.schedules()["nightly"].NextTick))

	audit, err := h.s.ScheduleAudit(h.ctx, nightlyKey)
	require.NoError(t, err)
	require.Len(t, audit, 2)
	require.Equal(t, "paused", audit[0].Action)
	require.Equal(t, "cli:ada", audit[0].Actor)
	require.Equal(t, "maintenance window", audit[0].Reason)
	require.Equal(t, "resumed", audit[1].Action)
	require.Equal(t, "api:ops", audit[1].Actor)

	_, err = h.s.PauseSchedule(h.ctx, store.SchedulePause{Key: store.ScheduleKey{Namespace: "ns", Workflow: "wf", Name: "nope"}, Paused: true})
	require.ErrorIs(t, err, store.ErrNotFound)
}

func testScheduleNextWake(t *testing.T, h *harness) {
	_, ok, err := h.s.NextWake(h.ctx)
	require.NoError(t, err)
	require.False(t, ok)
	tick := h.clock.Now().Add(time.Hour).Truncate(time.Second)
	h.syncSchedules("1", sched("nightly", "@hourly", tick))
	next, ok, err := h.s.NextWake(h.ctx)
	require.NoError(t, err)
	require.True(t, ok)
	require.True(t, tick.Equal(next), "the maintenance leader sleeps until the next tick")
	_, err = h.s.PauseSchedule(h.ctx, store.SchedulePause{Key: nightlyKey, Paused: true})
	require.NoError(t, err)
	_, ok, err = h.s.NextWake(h.ctx)
	require.NoError(t, err)
	require.False(t, ok, "a paused schedule wakes nobody")
}
