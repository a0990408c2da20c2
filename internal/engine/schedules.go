package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/weftrun/weft/internal/event"
	"github.com/weftrun/weft/internal/schedule"
	"github.com/weftrun/weft/internal/textsafe"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/workflow"
)

// This file holds cron schedules: registering them with a workflow
// version, firing due ticks (the maintenance leader's work, woken by the
// store's next due time rather than by polling), and pausing them.

// scheduler registers workflows' cron schedules and fires the due ones
// (the maintenance leader's work).
type scheduler struct {
	store store.Store
	log   *slog.Logger
	// events is told of the tasks schedules submit.
	events *event.Bus
	// prepare resolves a submission into a task insert (Engine.prepare).
	prepare func(ctx context.Context, s Submission, resolved map[string]*resolvedWorkflow) (store.TaskInsert, error)
	// engineID names the engine in the schedules it fires.
	engineID func() string
	// nudge asks the maintenance leader for another round at once.
	nudge func()
}

// sync records w's schedules as the workflow's, each with its first tick
// after now.
func (sc *scheduler) sync(ctx context.Context, w *workflow.Workflow, now time.Time) error {
	recs := make([]store.ScheduleRecord, len(w.Schedules))
	for i, s := range w.Schedules {
		c, err := schedule.Parse(s.Cron, s.TimeZone)
		if err != nil {
			return fmt.Errorf("%w schedule %s: %w", store.ErrInvalid, s.Name, err)
		}
		catchUp, maxCatchUp := string(s.CatchUp), s.MaxCatchUp
		if catchUp == "" {
			catchUp = schedule.Skip
		}
		if maxCatchUp == 0 {
			maxCatchUp = schedule.DefaultMaxCatchUp
		}
		recs[i] = store.ScheduleRecord{ScheduleKey: store.ScheduleKey{Namespace: w.Namespace, Workflow: w.Name, Name: s.Name},
			Version: w.Version, Cron: s.Cron, TimeZone: s.TimeZone, Input: s.Input, CatchUp: catchUp, MaxCatchUp: maxCatchUp,
			NextTick: c.Next(now)}
	}
	// The store tells the maintenance loop of new next ticks (DueWake).
	if _, err := sc.store.SyncSchedules(ctx, w.Namespace, w.Name, w.Version, recs); err != nil {
		return fmt.Errorf("register schedules of %s: %w", w.Ref(), err)
	}
	return nil
}

// scheduleBatch bounds the schedules one maintenance round fires; more
// make the round nudge itself.
const scheduleBatch = 100

// fire submits the tasks of the schedules due at now, under each
// one's catch-up policy. A schedule another engine fired meanwhile is left
// alone; one whose workflow or definition cannot be used is logged and
// moved past its due ticks so that it does not block the others. The
// maintenance leader calls it when something is due; it returns the first
// failure, the round's.
func (sc *scheduler) fire(ctx context.Context, now time.Time) error {
	due, err := sc.store.DueSchedules(ctx, now, scheduleBatch)
	if err != nil {
		return fmt.Errorf("due schedules: %w", err)
	}
	var first error
	for _, s := range due {
		if err := sc.fireOne(ctx, s, now); err != nil && !errors.Is(err, store.ErrConflict) && first == nil {
			first = fmt.Errorf("fire schedule %s: %w", s, err)
		}
	}
	if len(due) == scheduleBatch {
		sc.nudge()
	}
	return first
}

// fireOne handles one due schedule.
func (sc *scheduler) fireOne(ctx context.Context, s store.ScheduleRecord, now time.Time) error {
	c, err := schedule.Parse(s.Cron, s.TimeZone)
	if errors.Is(err, schedule.ErrNeverFires) {
		// Registered before such expressions were refused: it would be
		// due at every round, and never fire. Paused, with why.
		sc.log.Error("schedule never fires; it is paused", "schedule", s.String(), "cron", s.Cron)
		_, err := sc.store.PauseSchedule(ctx, store.SchedulePause{Key: s.ScheduleKey, Paused: true, Actor: sc.engineID(),
			Reason: "paused by the engine: its cron expression names no time in the next five years"})
		return err
	}
	if err != nil {
		// Validated at registration: only a time zone database that lost
		// the zone gets here. Say so, and try again at the next round.
		return fmt.Errorf("%w schedule %s: %w", store.ErrInvalid, s, err)
	}
	plan := c.Decide(s.NextTick, now, s.CatchUp, s.MaxCatchUp)
	fire := store.ScheduleFire{Key: s.ScheduleKey, Expect: s.NextTick, Next: plan.Next, Ticks: plan.Fire, EngineID: sc.engineID()}
	if len(plan.Fire) > 0 {
		subs := make([]Submission, len(plan.Fire))
		for i, tick := range plan.Fire {
			subs[i] = Submission{Workflow: versionRef(s.Namespace, s.Workflow, s.Version), Input: s.Input, Key: TickKey(s.ScheduleKey, tick),
				OnConflict: workflow.OnConflictReturn}
		}
		resolved := map[string]*resolvedWorkflow{}
		for _, sub := range subs {
			in, err := sc.prepare(ctx, sub, resolved)
			if errors.Is(err, store.ErrInvalid) || errors.Is(err, store.ErrNotFound) {
				// Trying again cannot help, and every tick would be
				// dropped: paused, with why, where operators look
				// (weft schedules, the history), until one resumes it.
				sc.log.Error("schedule cannot submit its task; it is paused", "schedule", s.String(), "error", err)
				reason := "paused by the engine: its task cannot be submitted: " + err.Error()
				if len(reason) > store.MaxReason {
					reason = strings.ToValidUTF8(reason[:store.MaxReason], "")
				}
				_, perr := sc.store.PauseSchedule(ctx, store.SchedulePause{Key: s.ScheduleKey, Paused: true, Actor: sc.engineID(),
					Reason: textsafe.String(reason)})
				return perr
			}
			if err != nil {
				return fmt.Errorf("schedule %s: %w", s, err)
			}
			fire.Tasks = append(fire.Tasks, in)
		}
	}
	res, err := sc.store.FireSchedule(ctx, fire)
	if err != nil {
		return err
	}
	if plan.Missed > 0 {
		sc.log.Warn("schedule missed ticks", "schedule", s.String(), "missed", plan.Missed, "catch_up", s.CatchUp)
	}
	for _, r := range res {
		if !r.Duplicate {
			sc.log.Info("schedule fired", "schedule", s.String(), "task_id", r.Task.ID, "tick", r.Task.ScheduleTick)
			sc.events.Publish(event.Event{Kind: event.Submitted, Namespace: r.Task.Namespace, Workflow: r.Task.Workflow, TaskID: r.Task.ID})
		}
	}
	return nil
}

// TickKey is the idempotency key of the task a schedule submits for one
// tick: the tick is the task's identity in its namespace.
func TickKey(k store.ScheduleKey, tick time.Time) string {
	return "schedule:" + k.Workflow + "/" + k.Name + "@" + tick.UTC().Format(time.RFC3339)
}
