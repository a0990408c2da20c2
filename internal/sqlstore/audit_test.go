package sqlstore

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFoldAudit(t *testing.T) {
	t.Parallel()
	step := func(task int64, name, to string) auditRow {
		return auditRow{taskID: task, step: name, from: "x", to: to, engine: "e1"}
	}
	task := func(id int64, to string) auditRow {
		return auditRow{taskID: id, from: "y", to: to, reason: "r", engine: "e1"}
	}
	folded := func(r auditRow, to string) auditRow {
		r.taskFrom, r.taskTo, r.taskReason = "y", to, "r"
		return r
	}
	for _, tc := range []struct {
		name string
		in   []auditRow
		want []auditRow
	}{
		{"a task after its step rides on it", []auditRow{step(1, "a", "running"), task(1, "running")},
			[]auditRow{folded(step(1, "a", "running"), "running")}},
		{"other tasks between do not matter", []auditRow{step(1, "a", "running"), step(2, "a", "running"), task(1, "running"), task(2, "running")},
			[]auditRow{folded(step(1, "a", "running"), "running"), folded(step(2, "a", "running"), "running")}},
		{"a task first keeps its row", []auditRow{task(1, "pending"), step(1, "a", "ready")},
			[]auditRow{task(1, "pending"), step(1, "a", "ready")}},
		{"one task transition per row", []auditRow{step(1, "a", "completed"), task(1, "completed"), task(1, "archived")},
			[]auditRow{folded(step(1, "a", "completed"), "completed"), task(1, "archived")}},
		{"only on the task's last row", []auditRow{step(1, "a", "completed"), step(1, "b", "ready"), task(1, "running")},
			[]auditRow{step(1, "a", "completed"), folded(step(1, "b", "ready"), "running")}},
		{"not across engines", []auditRow{step(1, "a", "completed"), {taskID: 1, from: "y", to: "completed", engine: "e2"}},
			[]auditRow{step(1, "a", "completed"), {taskID: 1, from: "y", to: "completed", engine: "e2"}}},
		{"nothing to fold", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := foldAudit(append([]auditRow(nil), tc.in...))
			if len(tc.want) == 0 {
				require.Empty(t, got)
				return
			}
			require.Equal(t, tc.want, got)
		})
	}
}
