package weft

import (
	"context"

	"github.com/weftrun/weft/store"
)

// Schedule is a registered cron schedule with its state: paused or not,
// its last tick that submitted a task and its next tick due. Workflows
// declare schedules (workflow.Workflow.Schedule, or schedules: in YAML);
// registering the workflow registers them, and the maintenance leader
// submits one task per tick across every engine on the database.
type Schedule = store.ScheduleRecord

// ScheduleKey names a schedule: namespace, workflow and the schedule's
// name.
type ScheduleKey = store.ScheduleKey

// ScheduleFilter selects schedules for Schedules; empty fields select all.
type ScheduleFilter = store.ScheduleFilter

// ScheduleAuditEntry is one recorded pause or resumption of a schedule.
type ScheduleAuditEntry = store.ScheduleAuditEntry

// Schedules lists the registered schedules f selects.
func (e *Engine) Schedules(ctx context.Context, f ScheduleFilter) ([]Schedule, error) {
	return e.core.Admin().Schedules(ctx, f)
}

// FindSchedule resolves "namespace/workflow/name", or a bare schedule name
// that only one schedule has (several are ErrInvalid, none ErrNotFound).
func (e *Engine) FindSchedule(ctx context.Context, ref string) (Schedule, error) {
	return e.core.Admin().FindSchedule(ctx, ref)
}

// PauseSchedule stops a schedule from firing until it is resumed,
// recording op's actor and reason in its audit. Pausing a paused schedule
// changes nothing.
func (e *Engine) PauseSchedule(ctx context.Context, k ScheduleKey, op Operator) (Schedule, error) {
	return e.core.Admin().PauseSchedule(ctx, k, true, op.Actor, op.Reason)
}

// ResumeSchedule lets a paused schedule fire again from its next tick
// after now (ticks that passed while it was paused are not caught up),
// recording op's actor and reason in its audit.
func (e *Engine) ResumeSchedule(ctx context.Context, k ScheduleKey, op Operator) (Schedule, error) {
	return e.core.Admin().PauseSchedule(ctx, k, false, op.Actor, op.Reason)
}

// ScheduleAudit returns a schedule's pauses and resumptions, oldest first.
func (e *Engine) ScheduleAudit(ctx context.Context, k ScheduleKey) ([]ScheduleAuditEntry, error) {
	return e.core.Admin().ScheduleAudit(ctx, k)
}
