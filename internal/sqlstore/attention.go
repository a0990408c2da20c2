package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/weftrun/weft/internal/sqlstore/sqldb"
	"github.com/weftrun/weft/internal/sqlstore/sqltx"
	"github.com/weftrun/weft/store"
)

// This file holds the attention list: the tasks that need a person, and
// why.

// servedBy is true when a live engine or remote worker serves the handler
// of the step aliased s. Neither subquery depends on the step: each is
// read once per statement (the handlers into a hash), not once per ready
// step, so a long backlog with no engine costs a scan of the ready steps.
const servedBy = `(EXISTS (SELECT 1 FROM engine_handlers h JOIN engines e ON e.id = h.engine_id WHERE h.handler = '*' AND e.state = 'live')
	OR s.handler IN (SELECT h.handler FROM engine_handlers h JOIN engines e ON e.id = h.engine_id WHERE e.state = 'live'))`

// attentionSteps is the condition on a step (aliased s) that makes its task
// need attention; its arguments come from attentionArgs.
const attentionSteps = `(s.state IN ('failed', 'expired')
	OR (s.state = 'ready' AND s.sort_key + s.priority * ? < ? AND NOT ` + servedBy + `)
	OR (s.state = 'waiting' AND s.signal != '' AND s.run_at IS NOT NULL AND s.run_at < ?))`

func (s *reads) attentionArgs(staleAfter time.Duration, now int64) []any {
	if staleAfter <= 0 {
		staleAfter = store.DefaultStaleAfter
	}
	return []any{s.Aging, now - staleAfter.Microseconds(), now}
}

// attentionWhere is the condition on a task: it is not cancelled or
// completed and a step of it needs attention. Failed steps are found by
// the task's counter (failed), the rest through the steps' own indexes.
func (s *reads) attentionWhere(staleAfter time.Duration, now int64) (string, []any) {
	args := s.attentionArgs(staleAfter, now)
	return `state IN ('pending', 'running', 'failed') AND (failed > 0 OR id IN (SELECT s.task_id FROM steps s WHERE
		(s.state = 'ready' AND s.sort_key + s.priority * ? < ? AND NOT ` + servedBy + `)
		OR (s.state = 'waiting' AND s.signal != '' AND s.run_at IS NOT NULL AND s.run_at < ?)))`, args
}

// attentionReasons fills the Attention of tasks with what needs a person,
// one line per step.
func (s *reads) attentionReasons(ctx context.Context, read sqltx.Reader, tasks []store.Task, staleAfter time.Duration, now int64) error {
	if len(tasks) == 0 {
		return nil
	}
	ids := make([]any, len(tasks))
	at := make(map[int64]int, len(tasks))
	for i, t := range tasks {
		ids[i], at[t.ID] = t.ID, i
	}
	args := append(s.attentionArgs(staleAfter, now), ids...)
	rows, err := read(ctx, `SELECT s.task_id, s.name, s.handler, s.state, s.error, s.signal, s.sort_key + s.priority * `+fmt.Sprint(s.Aging)+`, s.run_at
		FROM steps s WHERE `+attentionSteps+` AND s.task_id IN (`+sqltx.Placeholders(len(ids))+`) ORDER BY s.task_id, s.idx`, args...)
	if err != nil {
		return fmt.Errorf("attention: %w", err)
	}
	type reason struct {
		task int64
		text string
	}
	reasons, err := sqldb.Collect(rows, func(r sqldb.Row) (reason, error) {
		var task int64
		var name, handler, st, msg, signal string
		var readyAt int64
		var runAt sql.NullInt64
		if err := r.Scan(&task, &name, &handler, &st, &msg, &signal, &readyAt, &runAt); err != nil {
			return reason{}, err
		}
		switch st {
		case "failed":
			return reason{task, fmt.Sprintf("step %s failed: %s", name, abbrevText(msg, 200))}, nil
		case "expired":
			return reason{task, fmt.Sprintf("step %s expired before it ran", name)}, nil
		case "ready":
			return reason{task, fmt.Sprintf("step %s ready since %s: no live engine or worker serves handler %s",
				name, time.UnixMicro(readyAt).UTC().Format(time.RFC3339), handler)}, nil
		default:
			deadline := ""
			if runAt.Valid {
				deadline = " " + time.UnixMicro(runAt.Int64).UTC().Format(time.RFC3339)
			}
			return reason{task, fmt.Sprintf("step %s waits for signal %s past its deadline%s", name, signal, deadline)}, nil
		}
	})
	if err != nil {
		return fmt.Errorf("attention: %w", err)
	}
	for _, r := range reasons {
		i := at[r.task]
		tasks[i].Attention = append(tasks[i].Attention, r.text)
	}
	return nil
}

func abbrevText(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
