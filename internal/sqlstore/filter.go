package sqlstore

import (
	"strings"

	"github.com/weftrun/weft/internal/sqlstore/sqltx"
	"github.com/weftrun/weft/store"
)

// This file turns a store.TaskFilter into the WHERE clause that ListTasks,
// the count of a bulk action and its batches share, so that every way of
// selecting tasks selects the same ones.

// taskWhere returns the conditions of f on the tasks table (unqualified
// columns) joined by AND, "" for none, with their arguments. now is the
// time the attention conditions are judged at (microseconds).
func (s *reads) taskWhere(f store.TaskFilter, now int64) (string, []any) {
	var where []string
	var args []any
	add := func(cond string, a ...any) {
		where = append(where, cond)
		args = append(args, a...)
	}
	if f.Namespace != "" {
		add("namespace = ?", f.Namespace)
	}
	if f.Namespaces != nil {
		in, a := s.TextIn("namespace", f.Namespaces)
		add(in, a...)
	}
	if len(f.IDs) > 0 {
		in, a := s.IDIn("id", f.IDs)
		add(in, a...)
	}
	if f.Workflow != "" {
		add("workflow = ?", f.Workflow)
	}
	if f.State != "" {
		add("state = ?", string(f.State))
	}
	if f.Key != "" {
		add("idempotency_key = ?", f.Key)
	}
	if f.Schedule != "" {
		add("schedule = ?", f.Schedule)
	}
	if len(f.States) > 0 {
		a := make([]any, len(f.States))
		for i, st := range f.States {
			a[i] = string(st)
		}
		add("state IN ("+sqltx.Placeholders(len(a))+")", a...)
	}
	if f.BeforeID > 0 {
		add("id < ?", f.BeforeID)
	}
	if !f.CreatedAfter.IsZero() {
		add("created_at >= ?", f.CreatedAfter.UnixMicro())
	}
	if !f.CreatedBefore.IsZero() {
		add("created_at < ?", f.CreatedBefore.UnixMicro())
	}
	if !f.FinishedBefore.IsZero() {
		add("finished_at IS NOT NULL AND finished_at < ?", f.FinishedBefore.UnixMicro())
	}
	for _, k := range sqltx.SortedKeys(f.Tags) {
		// Each tag is an index lookup on task_tags (key, value, task_id).
		add("id IN (SELECT task_id FROM task_tags WHERE key = ? AND value = ?)", k, f.Tags[k])
	}
	if f.Attention {
		cond, a := s.attentionWhere(f.StaleAfter, now)
		add(cond, a...)
	}
	return strings.Join(where, " AND "), args
}
