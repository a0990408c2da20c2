package sqltx

import (
	"fmt"
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
	withSteps := func(r auditRow, steps ...string) auditRow {
		r.steps = steps
		return r
	}
	attempt := func(r auditRow, n int) auditRow {
		r.Attempt = n
		return r
	}
	// ended: a run's end, its claim read with it (ClaimRead) or not.
	ended := func(task int64, name, to string, claim *RunClaim, read bool) auditRow {
		return auditRow{taskID: task, step: name, from: "running", to: to, engine: "e1", StepID: task*10 + int64(name[0]), Claim: claim, ClaimRead: read}
	}
	claim, starts, later := &RunClaim{At: 100, Attempt: 1, Engine: "e1"}, &RunClaim{At: 100, Attempt: 1, Starts: true, Engine: "e1"},
		&RunClaim{At: 200, Attempt: 1, Engine: "e1"}
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
		{"steps of a task claimed together ride on the first, after its task's start", []auditRow{step(1, "a", "running"), task(1, "running"), step(1, "b", "running"), step(1, "c", "running")},
			[]auditRow{withSteps(folded(step(1, "a", "running"), "running"), "b", "running", "c", "running")}},
		{"a task's end after steps that ride on one row gets its own", []auditRow{step(1, "a", "completed"), step(1, "b", "completed"), task(1, "completed")},
			[]auditRow{withSteps(step(1, "a", "completed"), "b", "completed"), task(1, "completed")}},
		{"only the same transition rides", []auditRow{step(1, "a", "completed"), step(1, "b", "failed"), attempt(step(1, "c", "failed"), 2)},
			[]auditRow{step(1, "a", "completed"), step(1, "b", "failed"), attempt(step(1, "c", "failed"), 2)}},
		{"not across tasks or engines", []auditRow{step(1, "a", "running"), step(2, "a", "running"), {taskID: 2, step: "b", from: "x", to: "running", engine: "e2"}},
			[]auditRow{step(1, "a", "running"), step(2, "a", "running"), {taskID: 2, step: "b", from: "x", to: "running", engine: "e2"}}},
		{"not on a submission's row", []auditRow{task(1, "pending"), step(1, "a", "ready")},
			[]auditRow{task(1, "pending"), step(1, "a", "ready")}},
		{"runs claimed together end on one row, after the one that started the task", []auditRow{ended(1, "a", "completed", starts, true), ended(1, "b", "completed", claim, true)},
			[]auditRow{withSteps(ended(1, "a", "completed", starts, true), "b", "completed")}},
		{"runs whose claims are recorded end on one row", []auditRow{ended(1, "a", "completed", nil, true), ended(1, "b", "completed", nil, true)},
			[]auditRow{withSteps(ended(1, "a", "completed", nil, true), "b", "completed")}},
		{"a run that started the task keeps its row", []auditRow{ended(1, "a", "completed", claim, true), ended(1, "b", "completed", starts, true)},
			[]auditRow{ended(1, "a", "completed", claim, true), ended(1, "b", "completed", starts, true)}},
		{"runs of other claims keep their rows", []auditRow{ended(1, "a", "completed", claim, true), ended(1, "b", "completed", later, true),
			ended(1, "c", "completed", nil, true)},
			[]auditRow{ended(1, "a", "completed", claim, true), ended(1, "b", "completed", later, true), ended(1, "c", "completed", nil, true)}},
		{"runs whose claims are read as the row is written keep their rows", []auditRow{ended(1, "a", "completed", nil, false), ended(1, "b", "completed", nil, false)},
			[]auditRow{ended(1, "a", "completed", nil, false), ended(1, "b", "completed", nil, false)}},
		{"a run's end does not ride on another transition", []auditRow{step(1, "a", "completed"), {taskID: 1, step: "b", from: "x", to: "completed", engine: "e1", StepID: 2}},
			[]auditRow{step(1, "a", "completed"), {taskID: 1, step: "b", from: "x", to: "completed", engine: "e1", StepID: 2}}},
		{"nothing to fold", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := foldAudit(append([]auditRow(nil), tc.in...), map[int64]int{})
			if len(tc.want) == 0 {
				require.Empty(t, got)
				return
			}
			require.Equal(t, tc.want, got)
		})
	}
}

func TestAuditSubmittedFoldsSteps(t *testing.T) {
	t.Parallel()
	steps := func(from, to int) []string {
		var out []string
		for i := from; i < to; i++ {
			out = append(out, fmt.Sprintf("s%d", i), "ready")
		}
		return out
	}
	for _, tc := range []struct {
		name         string
		steps        int
		rows, folded int // rows written, steps on the task's row
	}{
		{"no steps", 0, 1, 0},
		{"one row for the task and its steps", 5, 1, 5},
		{"as many as one row holds", EntriesPerRow - 1, 1, EntriesPerRow - 1},
		{"the rest on a row of their own", EntriesPerRow + 1, 2, EntriesPerRow - 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// Queued as a submission queues them: the task, then its steps.
			tx := &Tx{H: &Handle{Dialect: oneWriter{}}, Engine: "e1"}
			tx.Audit(7, "", "", "pending", 0, "submitted")
			for i := range tc.steps {
				tx.Audit(7, fmt.Sprintf("s%d", i), "", "ready", 0, "submitted")
			}
			rows := foldAudit(tx.Audits, map[int64]int{})
			require.Len(t, rows, tc.rows)
			first := rows[0]
			require.Equal(t, auditRow{taskID: 7, to: "pending", reason: "submitted", engine: "e1", steps: first.steps}, first)
			require.Equal(t, steps(0, tc.folded), append([]string(nil), first.steps...))
			if tc.rows > 1 {
				rest := rows[1]
				require.Equal(t, auditRow{taskID: 7, step: fmt.Sprintf("s%d", tc.folded), to: "ready", reason: "submitted", engine: "e1",
					steps: steps(tc.folded+1, tc.steps)}, rest)
			}
			n := 0
			for _, r := range rows {
				n += r.entries()
			}
			require.Equal(t, 1+tc.steps, n, "every entry once")
		})
	}
}

// TestAuditRunEndsFitTheirRows: the ends of runs one claim took, folded,
// never put more entries on a row than EntriesPerRow (each adds its claim
// and its end), and every entry is on some row.
func TestAuditRunEndsFitTheirRows(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 2, EntriesPerRow / 2, EntriesPerRow} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			t.Parallel()
			tx := &Tx{H: &Handle{Dialect: oneWriter{}}, Engine: "e1"}
			for i := range n {
				tx.AuditRunEnd(int64(i+1), 7, fmt.Sprintf("s%d", i), "completed", 1, "")
				r := &tx.Audits[len(tx.Audits)-1]
				r.Claim, r.ClaimRead = &RunClaim{At: 100, Attempt: 1, Engine: "e1"}, true
			}
			rows := foldAudit(tx.Audits, map[int64]int{})
			total := 0
			for _, r := range rows {
				require.LessOrEqual(t, r.entries(), EntriesPerRow)
				total += 2 * (1 + len(r.steps)/2) // a claim and an end each
			}
			require.Equal(t, 2*n, total)
			if n <= EntriesPerRow/2-2 {
				require.Len(t, rows, 1, "one claim's runs on one row")
			} else {
				require.Greater(t, len(rows), 1)
			}
		})
	}
}

// TestAuditScratch: queues and maps come back emptied, at most keptScratch
// of each are kept, and none past maxKeptAudits.
func TestAuditScratch(t *testing.T) {
	t.Parallel()
	var a auditScratch
	require.Nil(t, a.queue(), "nothing kept yet")
	require.Empty(t, a.fold())
	for i := range keptScratch + 2 {
		q := append(make([]auditRow, 0, 8), auditRow{taskID: int64(i), step: "s"})
		a.put(q, map[int64]int{int64(i): 0})
	}
	for range keptScratch {
		q, m := a.queue(), a.fold()
		require.Empty(t, q)
		require.Equal(t, 8, cap(q))
		require.Equal(t, auditRow{}, q[:1][0], "a kept queue references nothing")
		require.Empty(t, m)
	}
	require.Nil(t, a.queue(), "at most keptScratch kept")
	a.put(make([]auditRow, 0, maxKeptAudits+1), nil)
	require.Nil(t, a.queue(), "a huge queue is dropped")
	require.NotNil(t, a.fold(), "no map is nil")
}
