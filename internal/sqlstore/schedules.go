package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/weftrun/weft/internal/sqlstore/sqldb"
	"github.com/weftrun/weft/internal/sqlstore/sqltx"
	"github.com/weftrun/weft/internal/sqlstore/transition"
	"github.com/weftrun/weft/store"
)

// This file holds the cron schedules: their registration with a workflow
// version, the due ones, firing a tick (a compare-and-swap on the next tick
// plus the tasks, in one transaction), pause and resume.

const scheduleColumns = `namespace, workflow, name, version, cron, time_zone, input, catch_up, max_catch_up, paused, last_tick, next_tick, created_at, updated_at`

func scanSchedule(r sqldb.Row) (store.ScheduleRecord, error) {
	var s store.ScheduleRecord
	var input string
	var paused, next, created, updated int64
	var last sql.NullInt64
	err := r.Scan(&s.Namespace, &s.Workflow, &s.Name, &s.Version, &s.Cron, &s.TimeZone, &input, &s.CatchUp, &s.MaxCatchUp, &paused,
		&last, &next, &created, &updated)
	if err != nil {
		return s, fmt.Errorf("scan schedule: %w", err)
	}
	s.Input = []byte(input)
	s.Paused = paused != 0
	s.LastTick = sqltx.OptTime(last)
	s.NextTick = time.UnixMicro(next).UTC()
	s.CreatedAt, s.UpdatedAt = time.UnixMicro(created), time.UnixMicro(updated)
	return s, nil
}

// SyncSchedules makes a workflow's schedules those of version, unless a
// newer version's are stored.
func (s *maintenance) SyncSchedules(ctx context.Context, namespace, workflow, version string, scheds []store.ScheduleRecord) (bool, error) {
	changed := false
	err := s.write(ctx, "", func(t *transition.Tx) error {
		rows, err := t.Query(`SELECT `+scheduleColumns+` FROM schedules WHERE namespace = ? AND workflow = ?`, namespace, workflow)
		if err != nil {
			return fmt.Errorf("read schedules: %w", err)
		}
		existing, err := sqldb.Collect(rows, scanSchedule)
		if err != nil {
			return fmt.Errorf("read schedules: %w", err)
		}
		// The newest registered version's schedules are the workflow's
		// (also when it has none).
		versions, err := t.Strings(`SELECT version FROM workflows WHERE namespace = ? AND name = ?`, namespace, workflow)
		if err != nil {
			return fmt.Errorf("read versions of %s/%s: %w", namespace, workflow, err)
		}
		for _, v := range versions {
			if store.CompareVersions(v, version) > 0 {
				return nil
			}
		}
		old := map[string]store.ScheduleRecord{}
		for _, e := range existing {
			if store.CompareVersions(e.Version, version) > 0 {
				return nil // a newer version's schedules are the workflow's
			}
			old[e.Name] = e
		}
		keep := map[string]bool{}
		for _, sc := range scheds {
			keep[sc.Name] = true
			input := string(sc.Input)
			if input == "" {
				input = "{}"
			}
			e, ok := old[sc.Name]
			switch {
			case !ok:
				_, err = t.Exec(`INSERT INTO schedules (`+scheduleColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 0, NULL, ?, ?, ?)`,
					namespace, workflow, sc.Name, version, sc.Cron, sc.TimeZone, input, sc.CatchUp, sc.MaxCatchUp, sc.NextTick.UnixMicro(), t.Now, t.Now)
			case e.Version == version && e.Cron == sc.Cron && e.TimeZone == sc.TimeZone && sameJSON(input, e.Input) &&
				e.CatchUp == sc.CatchUp && e.MaxCatchUp == sc.MaxCatchUp:
				continue // unchanged
			case e.Cron == sc.Cron && e.TimeZone == sc.TimeZone:
				_, err = t.Exec(`UPDATE schedules SET version = ?, input = ?, catch_up = ?, max_catch_up = ?, updated_at = ?
					WHERE namespace = ? AND workflow = ? AND name = ?`, version, input, sc.CatchUp, sc.MaxCatchUp, t.Now, namespace, workflow, sc.Name)
			default:
				_, err = t.Exec(`UPDATE schedules SET version = ?, cron = ?, time_zone = ?, input = ?, catch_up = ?, max_catch_up = ?, next_tick = ?, updated_at = ?
					WHERE namespace = ? AND workflow = ? AND name = ?`, version, sc.Cron, sc.TimeZone, input, sc.CatchUp, sc.MaxCatchUp, sc.NextTick.UnixMicro(), t.Now,
					namespace, workflow, sc.Name)
			}
			if err != nil {
				return fmt.Errorf("save schedule %s: %w", sc.Name, err)
			}
			changed, t.Timed = true, true // a new next tick
		}
		for name := range old {
			if keep[name] {
				continue
			}
			if _, err := t.Exec(`DELETE FROM schedules WHERE namespace = ? AND workflow = ? AND name = ?`, namespace, workflow, name); err != nil {
				return fmt.Errorf("remove schedule %s: %w", name, err)
			}
			changed = true
		}
		return nil
	})
	return changed, err
}

// ListSchedules returns the schedules f selects.
func (s *maintenance) ListSchedules(ctx context.Context, f store.ScheduleFilter) ([]store.ScheduleRecord, error) {
	rows, err := s.Read(ctx, `SELECT `+scheduleColumns+` FROM schedules
		WHERE (? = '' OR namespace = ?) AND (? = '' OR workflow = ?) AND (? = '' OR name = ?)
		ORDER BY namespace, workflow, name`, f.Namespace, f.Namespace, f.Workflow, f.Workflow, f.Name, f.Name)
	if err != nil {
		return nil, fmt.Errorf("list schedules: %w", err)
	}
	out, err := sqldb.Collect(rows, scanSchedule)
	if err != nil {
		return nil, fmt.Errorf("list schedules: %w", err)
	}
	return out, nil
}

// DueSchedules returns schedules not paused whose next tick has come.
func (s *maintenance) DueSchedules(ctx context.Context, now time.Time, limit int) ([]store.ScheduleRecord, error) {
	rows, err := s.Read(ctx, `SELECT `+scheduleColumns+` FROM schedules WHERE paused = 0 AND next_tick <= ? ORDER BY next_tick LIMIT ?`,
		now.UnixMicro(), max(limit, 1))
	if err != nil {
		return nil, fmt.Errorf("due schedules: %w", err)
	}
	out, err := sqldb.Collect(rows, scanSchedule)
	if err != nil {
		return nil, fmt.Errorf("due schedules: %w", err)
	}
	return out, nil
}

// FireSchedule moves a schedule's next tick and inserts the tasks of the
// ticks fired, in one transaction.
func (s *maintenance) FireSchedule(ctx context.Context, f store.ScheduleFire) ([]store.InsertResult, error) {
	if len(f.Ticks) != len(f.Tasks) {
		return nil, fmt.Errorf("%w schedule fire: %d ticks but %d tasks", store.ErrInvalid, len(f.Ticks), len(f.Tasks))
	}
	var out []store.InsertResult
	err := s.write(ctx, f.EngineID, func(t *transition.Tx) error {
		var last any
		if len(f.Ticks) > 0 {
			last = f.Ticks[len(f.Ticks)-1].UnixMicro()
		}
		res, err := t.Exec(`UPDATE schedules SET next_tick = ?, last_tick = COALESCE(?, last_tick)
			WHERE namespace = ? AND workflow = ? AND name = ? AND next_tick = ? AND paused = 0`,
			f.Next.UnixMicro(), last, f.Key.Namespace, f.Key.Workflow, f.Key.Name, f.Expect.UnixMicro())
		if err != nil {
			return fmt.Errorf("move schedule %s: %w", f.Key, err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return fmt.Errorf("move schedule %s: %w", f.Key, err)
		} else if n == 0 {
			return store.Conflictf("schedule %s was fired, paused or changed meanwhile", f.Key)
		}
		if out, err = t.InsertTasks(f.Tasks); err != nil {
			return err
		}
		for i, r := range out {
			if r.Duplicate {
				continue
			}
			tick := f.Ticks[i].UTC()
			if _, err := t.Exec(`UPDATE tasks SET schedule = ?, schedule_tick = ? WHERE id = ?`, f.Key.Name, tick.UnixMicro(), r.Task.ID); err != nil {
				return fmt.Errorf("mark task %d of schedule %s: %w", r.Task.ID, f.Key, err)
			}
			out[i].Task.Schedule, out[i].Task.ScheduleTick = f.Key.Name, &tick
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// PauseSchedule pauses or resumes a schedule.
func (s *maintenance) PauseSchedule(ctx context.Context, p store.SchedulePause) (store.ScheduleRecord, error) {
	var rec store.ScheduleRecord
	err := s.write(ctx, "", func(t *transition.Tx) error {
		k := p.Key
		var err error
		rec, err = scanSchedule(t.QueryRow(`SELECT `+scheduleColumns+` FROM schedules WHERE namespace = ? AND workflow = ? AND name = ?`,
			k.Namespace, k.Workflow, k.Name))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("schedule %s: %w", k, store.ErrNotFound)
		}
		if err != nil {
			return err
		}
		if rec.Paused == p.Paused {
			return nil
		}
		t.Timed = !p.Paused // a resumed schedule's next tick
		paused, action, next := 0, "resumed", rec.NextTick
		if p.Paused {
			paused, action = 1, "paused"
		} else {
			next = p.Next.UTC()
		}
		if _, err := t.Exec(`UPDATE schedules SET paused = ?, next_tick = ?, updated_at = ? WHERE namespace = ? AND workflow = ? AND name = ?`,
			paused, next.UnixMicro(), t.Now, k.Namespace, k.Workflow, k.Name); err != nil {
			return fmt.Errorf("%s schedule %s: %w", action, k, err)
		}
		if _, err := t.Exec(`INSERT INTO schedule_audit (namespace, workflow, name, at, action, actor, reason) VALUES (?, ?, ?, ?, ?, ?, ?)`,
			k.Namespace, k.Workflow, k.Name, t.Now, action, p.Actor, p.Reason); err != nil {
			return fmt.Errorf("audit schedule %s: %w", k, err)
		}
		rec.Paused, rec.NextTick, rec.UpdatedAt = p.Paused, next, time.UnixMicro(t.Now)
		return nil
	})
	return rec, err
}

// ScheduleAudit returns a schedule's pauses and resumptions.
func (s *maintenance) ScheduleAudit(ctx context.Context, k store.ScheduleKey) ([]store.ScheduleAuditEntry, error) {
	rows, err := s.Read(ctx, `SELECT at, action, actor, reason FROM schedule_audit WHERE namespace = ? AND workflow = ? AND name = ? ORDER BY id`,
		k.Namespace, k.Workflow, k.Name)
	if err != nil {
		return nil, fmt.Errorf("schedule audit: %w", err)
	}
	out, err := sqldb.Collect(rows, func(r sqldb.Row) (store.ScheduleAuditEntry, error) {
		var e store.ScheduleAuditEntry
		var at int64
		err := r.Scan(&at, &e.Action, &e.Actor, &e.Reason)
		e.At = time.UnixMicro(at)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("schedule audit: %w", err)
	}
	return out, nil
}
