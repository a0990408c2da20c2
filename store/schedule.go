package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// Schedules holds the cron schedules of registered workflows and fires
// their ticks. The store keeps each schedule's next due tick; the engine,
// which reads cron expressions, decides which ticks to fire and what comes
// next, and FireSchedule records that with a compare-and-swap on the next
// tick it read, so a tick is fired once however many engines try.
type Schedules interface {
	// SyncSchedules makes the schedules of namespace/workflow those of
	// version, when no newer version of the workflow is registered and
	// none's schedules are stored (an older version changes nothing): schedules not listed are
	// removed, new ones added with their NextTick, and a changed
	// schedule takes its new definition, keeping its last tick and paused
	// state; its NextTick is taken only when its cron expression or time
	// zone changed. It reports whether it changed anything.
	SyncSchedules(ctx context.Context, namespace, workflow, version string, scheds []ScheduleRecord) (bool, error)
	// ListSchedules returns the schedules f selects, ordered by namespace,
	// workflow and name.
	ListSchedules(ctx context.Context, f ScheduleFilter) ([]ScheduleRecord, error)
	// DueSchedules returns up to limit schedules, not paused, whose next
	// tick is not after now, earliest first.
	DueSchedules(ctx context.Context, now time.Time, limit int) ([]ScheduleRecord, error)
	// FireSchedule records, in one transaction, that f.Key's ticks up to
	// f.Next were handled: it moves the schedule's next tick from f.Expect
	// to f.Next (ErrConflict when the schedule's next tick is no longer
	// f.Expect, it is paused or it is gone: another engine handled it) and
	// inserts f.Tasks, one per tick fired, each marked with the schedule
	// and its tick. A task whose idempotency key exists is not inserted
	// again.
	FireSchedule(ctx context.Context, f ScheduleFire) ([]InsertResult, error)
	// PauseSchedule pauses or resumes a schedule, recording who and why in
	// its audit. A resumed schedule's next tick is next (ticks that passed
	// while it was paused are not caught up). Pausing a paused schedule or
	// resuming a running one changes nothing and records nothing; an
	// unknown schedule is ErrNotFound.
	PauseSchedule(ctx context.Context, p SchedulePause) (ScheduleRecord, error)
	// ScheduleAudit returns a schedule's pauses and resumptions, oldest
	// first.
	ScheduleAudit(ctx context.Context, key ScheduleKey) ([]ScheduleAuditEntry, error)
}

// ScheduleKey names a schedule: namespace/workflow and the schedule's name.
type ScheduleKey struct {
	Namespace string
	Workflow  string
	Name      string
}

// String returns "namespace/workflow/name".
func (k ScheduleKey) String() string { return k.Namespace + "/" + k.Workflow + "/" + k.Name }

// ScheduleRecord is a stored schedule.
type ScheduleRecord struct {
	ScheduleKey
	// Version is the workflow version the schedule submits.
	Version    string
	Cron       string
	TimeZone   string
	Input      json.RawMessage
	CatchUp    string
	MaxCatchUp int
	Paused     bool
	// LastTick is the last tick that submitted a task; nil before the
	// first. NextTick is the next tick due.
	LastTick  *time.Time
	NextTick  time.Time
	CreatedAt time.Time
	UpdatedAt time.Time
}

// ScheduleFilter selects schedules; empty fields select all. The engine
// reads Workflow with workflow.ParseFilter ("namespace/name" or a name); the
// store gets the bare name.
type ScheduleFilter struct {
	Namespace string
	Workflow  string
	Name      string
}

// ScheduleFire is one maintenance round's handling of a due schedule.
type ScheduleFire struct {
	Key ScheduleKey
	// Expect is the next tick the engine read; Next is the one after the
	// ticks it handled.
	Expect, Next time.Time
	// Ticks are the ticks fired, oldest first, and Tasks their tasks, one
	// per tick.
	Ticks    []time.Time
	Tasks    []TaskInsert
	EngineID string
}

// SchedulePause is an operator's pause or resumption of a schedule.
type SchedulePause struct {
	Key    ScheduleKey
	Paused bool
	// Next is a resumed schedule's next tick.
	Next   time.Time
	Actor  string
	Reason string
}

// ScheduleAuditEntry is one recorded pause or resumption.
type ScheduleAuditEntry struct {
	At     time.Time
	Action string // "paused" or "resumed"
	Actor  string
	Reason string
}

// ParseScheduleRef reads a schedule reference, "namespace/workflow/name"
// or a bare name, into the filter that finds it.
func ParseScheduleRef(ref string) (ScheduleFilter, error) {
	var f ScheduleFilter
	switch parts := strings.Split(ref, "/"); len(parts) {
	case 1:
		f.Name = parts[0]
	case 3:
		f = ScheduleFilter{Namespace: parts[0], Workflow: parts[1], Name: parts[2]}
	}
	if f.Name == "" || strings.Contains(ref, "/") && (f.Namespace == "" || f.Workflow == "") {
		return f, Invalidf("schedule", "%q: want namespace/workflow/name or a name", ref)
	}
	return f, nil
}

// PickSchedule returns the one schedule of list, found for ref: none is
// ErrNotFound, several (a bare name that schedules of several workflows
// have) ErrInvalid. S is a ScheduleRecord or the API's form of one.
func PickSchedule[S fmt.Stringer](ref string, list []S) (S, error) {
	var none S
	switch len(list) {
	case 0:
		return none, fmt.Errorf("schedule %s: %w", ref, ErrNotFound)
	case 1:
		return list[0], nil
	}
	names := make([]string, len(list))
	for i, s := range list {
		names[i] = s.String()
	}
	return none, Invalidf("schedule", "%q: several schedules have that name (%s): give namespace/workflow/name",
		ref, strings.Join(names, ", "))
}
