package admin

import (
	"context"
	"fmt"

	"github.com/weftrun/weft/internal/schedule"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/workflow"
)

// Schedules lists the schedules f selects.
func (a *Admin) Schedules(ctx context.Context, f store.ScheduleFilter) ([]store.ScheduleRecord, error) {
	var err error
	if f.Namespace, f.Workflow, err = workflow.ParseFilter(f.Namespace, f.Workflow); err != nil {
		return nil, fmt.Errorf("list schedules: %w", err)
	}
	return a.store.ListSchedules(ctx, f)
}

// ScheduleAudit returns a schedule's pauses and resumptions.
func (a *Admin) ScheduleAudit(ctx context.Context, k store.ScheduleKey) ([]store.ScheduleAuditEntry, error) {
	return a.store.ScheduleAudit(ctx, k)
}

// FindSchedule resolves a schedule reference: "namespace/workflow/name",
// or a bare name that only one schedule has.
func (a *Admin) FindSchedule(ctx context.Context, ref string) (store.ScheduleRecord, error) {
	f, err := store.ParseScheduleRef(ref)
	if err != nil {
		return store.ScheduleRecord{}, err
	}
	list, err := a.store.ListSchedules(ctx, f)
	if err != nil {
		return store.ScheduleRecord{}, err
	}
	return store.PickSchedule(ref, list)
}

// PauseSchedule pauses (paused) or resumes a schedule, recording actor
// ("" records the engine's id) and reason. A resumed schedule's next tick
// is its first after now: ticks that passed while it was paused are not
// caught up.
func (a *Admin) PauseSchedule(ctx context.Context, k store.ScheduleKey, paused bool, actor, reason string) (store.ScheduleRecord, error) {
	if err := store.CheckReason(reason); err != nil {
		return store.ScheduleRecord{}, err
	}
	if actor == "" {
		actor = a.id()
	}
	p := store.SchedulePause{Key: k, Paused: paused, Actor: actor, Reason: reason}
	if !paused {
		list, err := a.store.ListSchedules(ctx, store.ScheduleFilter(k))
		if err != nil {
			return store.ScheduleRecord{}, err
		}
		if len(list) == 0 {
			return store.ScheduleRecord{}, fmt.Errorf("schedule %s: %w", k, store.ErrNotFound)
		}
		c, err := schedule.Parse(list[0].Cron, list[0].TimeZone)
		if err != nil {
			return store.ScheduleRecord{}, fmt.Errorf("%w schedule %s: %w", store.ErrInvalid, k, err)
		}
		p.Next = c.Next(a.clock())
	}
	// A resumed schedule's next tick reaches the maintenance loop through
	// the store (DueWake).
	return a.store.PauseSchedule(ctx, p)
}
