package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/wire"
)

func TestSubmit(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := writeFile(t, dir, "dag.yaml", dagYAML)
	db := filepath.Join(dir, "weft.db")

	r := weftCLI(t, "submit", file, "--db", db, "--input", `{"base": 1}`)
	requireCode(t, 0, r)
	require.Equal(t, "1\n", r.stdout)
	require.Empty(t, r.stderr)

	// By reference once registered, with and without version.
	r = weftCLI(t, "submit", "test/dag", "--db", db, "--key", "k1")
	requireCode(t, 0, r)
	require.Equal(t, "2\n", r.stdout)
	r = weftCLI(t, "submit", "test/dag@1", "--db", db, "--key", "k1")
	requireCode(t, 0, r)
	require.Equal(t, "2\n", r.stdout, "a duplicate prints the existing id")
	require.Contains(t, r.stderr, "task 2 already existed with this idempotency key (pending)")

	tests := []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"unregistered", []string{"submit", "test/other"}, 1, "workflow test/other is not registered in"},
		{"unknown version", []string{"submit", "test/dag@9"}, 1, "workflow test/dag@9 is not registered"},
		{"neither file nor ref", []string{"submit", "dag"}, 2, `"dag" is neither a template file nor a workflow reference`},
		{"bad input", []string{"submit", "test/dag", "--input", "nope"}, 2, "--input: not valid JSON"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := weftCLI(t, append(tt.args, "--db", db)...)
			requireCode(t, tt.code, r)
			require.Contains(t, r.stderr, tt.stderr)
			require.Empty(t, r.stdout)
		})
	}
}

func TestSubmitRefNeedsDatabase(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "missing.db")
	r := weftCLI(t, "submit", "test/dag", "--db", db)
	requireCode(t, 1, r)
	require.Contains(t, r.stderr, "no database at "+db)
	require.NoFileExists(t, db)
}

func TestTasksAndTask(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "weft.db")
	requireCode(t, 0, weftCLI(t, "run", writeFile(t, dir, "dag.yaml", dagYAML), "--db", db, "--input", `{"base": 1}`))
	requireCode(t, 1, weftCLI(t, "run", writeFile(t, dir, "fail.yaml", failYAML), "--db", db))
	requireCode(t, 0, weftCLI(t, "submit", "test/dag", "--db", db))

	t.Run("table", func(t *testing.T) {
		t.Parallel()
		r := weftCLI(t, "tasks", "--db", db)
		requireCode(t, 0, r)
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		require.Len(t, lines, 4)
		require.Regexp(t, `^ID\s+WORKFLOW\s+STATE\s+NOW\s+CREATED\s+FINISHED\s+ERROR$`, lines[0])
		require.Regexp(t, `^3\s+test/dag@1\s+pending\s+a ready\s+\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\s+-`, lines[1])
		require.Regexp(t, `^2\s+test/fail@1\s+failed\s+-\s+.*step "charge" failed: exit status 3: card declined`, lines[2])
		require.Regexp(t, `^1\s+test/dag@1\s+completed\s+-\s+`, lines[3])
	})
	tests := []struct {
		name string
		args []string
		ids  []int64
	}{
		{"all", nil, []int64{3, 2, 1}},
		{"by state", []string{"--state", "failed"}, []int64{2}},
		{"by workflow name", []string{"--workflow", "dag"}, []int64{3, 1}},
		{"by workflow reference", []string{"--workflow", "test/fail"}, []int64{2}},
		{"by namespace", []string{"--namespace", "other"}, []int64{}},
		{"limit", []string{"--limit", "2"}, []int64{3, 2}},
		{"before", []string{"--before", "3"}, []int64{2, 1}},
	}
	for _, tt := range tests {
		t.Run("json "+tt.name, func(t *testing.T) {
			t.Parallel()
			r := weftCLI(t, append([]string{"tasks", "--json", "--db", db}, tt.args...)...)
			requireCode(t, 0, r)
			var tasks []wire.Task
			require.NoError(t, json.Unmarshal([]byte(r.stdout), &tasks), r.stdout)
			ids := []int64{}
			for _, tk := range tasks {
				ids = append(ids, tk.ID)
			}
			require.Equal(t, tt.ids, ids)
		})
	}
	t.Run("empty table", func(t *testing.T) {
		t.Parallel()
		r := weftCLI(t, "tasks", "--db", db, "--state", "cancelled")
		requireCode(t, 0, r)
		require.Empty(t, r.stdout)
		require.Equal(t, "no tasks\n", r.stderr)
	})
	t.Run("bad filters", func(t *testing.T) {
		t.Parallel()
		for _, args := range [][]string{{"--state", "done"}, {"--limit", "0"}, {"--workflow", "test/dag@1"}, {"--workflow", "a/b/c"}} {
			r := weftCLI(t, append([]string{"tasks", "--db", db}, args...)...)
			requireCode(t, 2, r)
			require.NotEmpty(t, r.stderr)
		}
	})

	t.Run("task table", func(t *testing.T) {
		t.Parallel()
		r := weftCLI(t, "task", "2", "--db", db)
		requireCode(t, 0, r)
		require.Regexp(t, `(?m)^Task:\s+2$`, r.stdout)
		require.Regexp(t, `(?m)^State:\s+failed$`, r.stdout)
		require.Regexp(t, `(?m)^ID\s+STEP\s+STATE\s+ATTEMPTS\s+ERROR\s+RESULT$`, r.stdout)
		require.Regexp(t, `(?m)^\d+\s+ok\s+completed\s+1/3\s+-\s+\{\}$`, r.stdout)
		require.Regexp(t, `(?m)^\d+\s+charge\s+failed\s+1/1\s+exit status 3: card declined`, r.stdout)
		require.Regexp(t, `(?m)^\d+\s+ship\s+skipped\s+0/3\s+`, r.stdout)
		require.NotContains(t, r.stdout, "REASON")
	})
	t.Run("task audit", func(t *testing.T) {
		t.Parallel()
		r := weftCLI(t, "task", "2", "--audit", "--db", db)
		requireCode(t, 0, r)
		require.Regexp(t, `(?m)^TIME\s+STEP\s+FROM\s+TO\s+ATTEMPT\s+ENGINE\s+REASON$`, r.stdout)
		require.Regexp(t, `(?m)\s+charge\s+running\s+failed\s+1\s+`, r.stdout)
	})
	t.Run("task json", func(t *testing.T) {
		t.Parallel()
		r := weftCLI(t, "task", "1", "--json", "--db", db)
		requireCode(t, 0, r)
		task := decodeTask(t, r.stdout)
		require.Equal(t, state.TaskCompleted, task.State)
		require.JSONEq(t, `{"sum": 6}`, string(stepByName(t, task, "c").Result))
		require.NotContains(t, r.stdout, `"audit"`)
	})
	t.Run("task json audit", func(t *testing.T) {
		t.Parallel()
		r := weftCLI(t, "task", "1", "--json", "--audit", "--db", db)
		requireCode(t, 0, r)
		var got struct {
			ID    int64             `json:"id"`
			Steps []wire.Step       `json:"steps"`
			Audit []wire.AuditEntry `json:"audit"`
		}
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &got))
		require.Equal(t, int64(1), got.ID)
		require.Len(t, got.Steps, 3)
		require.NotEmpty(t, got.Audit)
		require.Equal(t, "completed", got.Audit[len(got.Audit)-1].To)
	})
	t.Run("not found", func(t *testing.T) {
		t.Parallel()
		r := weftCLI(t, "task", "42", "--db", db)
		requireCode(t, 1, r)
		require.Equal(t, "weft: task 42: not found\n", r.stderr)
	})
	t.Run("bad id", func(t *testing.T) {
		t.Parallel()
		r := weftCLI(t, "task", "x1", "--db", db)
		requireCode(t, 2, r)
		require.Contains(t, r.stderr, `invalid task id "x1"`)
	})
}

func TestInspectNeedsDatabase(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "missing.db")
	for _, args := range [][]string{{"tasks"}, {"task", "1"}, {"cancel", "1"}, {"retry", "1"}} {
		r := weftCLI(t, append(args, "--db", db)...)
		requireCode(t, 1, r)
		require.Contains(t, r.stderr, "no database at "+db)
	}
	require.NoFileExists(t, db)
}

func TestDatabaseFromEnvironment(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "env.db")
	env := func(k string) string {
		if k == "WEFT_DB" {
			return db
		}
		return ""
	}
	var stdout, stderr syncBuffer
	code := newApp(strings.NewReader(""), &stdout, &stderr, env).execute(t.Context(), []string{"submit", writeFile(t, dir, "dag.yaml", dagYAML)})
	require.Equal(t, 0, code, stderr.String())
	require.Equal(t, "1\n", stdout.String())
	require.FileExists(t, db)
}

func TestCancelRetry(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "weft.db")
	requireCode(t, 0, weftCLI(t, "submit", writeFile(t, dir, "dag.yaml", dagYAML), "--db", db))
	requireCode(t, 1, weftCLI(t, "run", writeFile(t, dir, "fail.yaml", failYAML), "--db", db))

	steps := []struct {
		name   string
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{"cancel pending", []string{"cancel", "1", "--reason", "no longer needed"}, 0, "task 1 cancelled\n", ""},
		{"cancel again", []string{"cancel", "1"}, 1, "", "weft: task 1 is cancelled and cannot be cancelled\n"},
		{"retry cancelled", []string{"retry", "1"}, 1, "", "weft: task 1 is cancelled, only failed tasks can be retried\n"},
		{"retry failed", []string{"retry", "2", "--reason", "card updated"}, 0, "task 2 retried: its failed steps are queued to run again\n", ""},
		{"retry again", []string{"retry", "2"}, 1, "", "weft: task 2 is running, only failed tasks can be retried\n"},
		{"cancel missing", []string{"cancel", "42"}, 1, "", "weft: task 42: not found\n"},
		{"retry missing", []string{"retry", "42"}, 1, "", "weft: task 42: not found\n"},
		{"bad id", []string{"cancel", "0"}, 2, "", "weft: invalid task id \"0\": must be a positive integer\n"},
		{"bad step id", []string{"step", "x"}, 2, "", "weft: invalid step id \"x\": must be a positive integer\n"},
		{"bad step id to retry", []string{"step", "retry", "0"}, 2, "", "weft: invalid step id \"0\": must be a positive integer\n"},
		{"no id", []string{"retry"}, 2, "", "weft: give a task ID or a filter (--state, --namespace, --workflow, --tag, --created-after, --created-before, --attention), or --all to act on every task\n"},
	}
	// In order: each step depends on the ones before.
	for _, s := range steps {
		r := weftCLI(t, append(s.args, "--db", db)...)
		requireCode(t, s.code, r)
		require.Equal(t, s.stdout, r.stdout, s.name)
		require.Equal(t, s.stderr, r.stderr, s.name)
	}
	r := weftCLI(t, "task", "2", "--json", "--db", db)
	requireCode(t, 0, r)
	task := decodeTask(t, r.stdout)
	require.Equal(t, state.TaskRunning, task.State)
	require.Equal(t, state.StepReady, stepByName(t, task, "charge").State)

	// The audit trail names the OS user who acted and why.
	for _, c := range []struct {
		id, to, reason string
	}{{"1", "cancelled", "no longer needed"}, {"2", "running", "card updated"}} {
		require.Equal(t, c.reason, taskAuditRow(t, weftCLI(t, "task", c.id, "--json", "--audit", "--db", db), c.to, "cli:"), c.id)
	}
}

// taskAuditRow returns the reason of the last task-level audit row of a
// `task --json --audit` output that moved to state, checking its actor
// starts with actor.
func taskAuditRow(t *testing.T, r result, to, actor string) string {
	t.Helper()
	requireCode(t, 0, r)
	var out struct {
		Audit []wire.AuditEntry `json:"audit"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out), r.stdout)
	var found *wire.AuditEntry
	for i, e := range out.Audit {
		if e.Step == "" && e.To == to {
			found = &out.Audit[i]
		}
	}
	require.NotNil(t, found, "no task row to %s: %s", to, r.stdout)
	require.True(t, strings.HasPrefix(found.EngineID, actor), "actor %q", found.EngineID)
	return found.Reason
}

// taskState reads a task's state through the CLI.
func taskState(ctx context.Context, db string, id int64) state.Task {
	if task := taskJSON(ctx, db, id); task != nil {
		return task.State
	}
	return ""
}

// taskJSON reads a task with its steps through `weft task --json`, or nil.
func taskJSON(ctx context.Context, db string, id int64) *wire.Task {
	r := weftIn(ctx, "", "task", strconv.FormatInt(id, 10), "--json", "--db", db)
	if r.code != 0 {
		return nil
	}
	var task wire.Task
	if json.Unmarshal([]byte(r.stdout), &task) != nil {
		return nil
	}
	return &task
}
