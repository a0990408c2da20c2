package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// syncBuffer is a bytes.Buffer safe for the engine's goroutines to log to.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// result is what one CLI invocation did.
type result struct {
	code           int
	stdout, stderr string
}

// weftIn runs the CLI in-process with ctx and stdin.
func weftIn(ctx context.Context, stdin string, args ...string) result {
	var stdout, stderr syncBuffer
	code := run(ctx, args, strings.NewReader(stdin), &stdout, &stderr)
	return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// weftCLI runs the CLI in-process.
func weftCLI(t *testing.T, args ...string) result {
	t.Helper()
	return weftIn(t.Context(), "", args...)
}

// requireCode checks the exit status, showing the output when it is wrong.
func requireCode(t *testing.T, want int, r result) {
	t.Helper()
	require.Equal(t, want, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
}

// writeFile writes a file into dir and returns its path.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
	return path
}

// decodeTask decodes the task JSON of `run --json` or `task --json`.
func decodeTask(t *testing.T, s string) *store.Task {
	t.Helper()
	var task store.Task
	require.NoError(t, json.Unmarshal([]byte(s), &task), s)
	return &task
}

func stepByName(t *testing.T, task *store.Task, name string) store.Step {
	t.Helper()
	for _, s := range task.Steps {
		if s.Name == name {
			return s
		}
	}
	require.Failf(t, "no such step", "%s", name)
	return store.Step{}
}

// dagYAML is a 3-step DAG passing data through stdin and stdout: a adds 1
// to the input's base, b doubles a's n, c adds both.
const dagYAML = `namespace: test
name: dag
version: "1"
steps:
  - name: a
    handler: exec
    config:
      command:
        - /bin/sh
        - -c
        - |
          base=$(sed -n 's/.*"input":{"base":\([0-9]*\)}.*/\1/p')
          echo "{\"n\": $((base + 1))}"
  - name: b
    handler: exec
    depends_on: [a]
    config:
      command:
        - /bin/sh
        - -c
        - |
          n=$(sed -n 's/.*"a":{"n":\([0-9]*\)}.*/\1/p')
          echo "{\"doubled\": $((n * 2))}"
  - name: c
    handler: exec
    depends_on: [a, b]
    config:
      command:
        - /bin/sh
        - -c
        - |
          ctx=$(cat)
          n=$(printf '%s' "$ctx" | sed -n 's/.*"a":{"n":\([0-9]*\)}.*/\1/p')
          d=$(printf '%s' "$ctx" | sed -n 's/.*"doubled":\([0-9]*\).*/\1/p')
          echo "{\"sum\": $((n + d))}"
`

// failYAML has a step that fails at once and a dependent that is skipped.
const failYAML = `namespace: test
name: fail
version: "1"
steps:
  - name: ok
    handler: exec
    config: {command: [/bin/sh, -c, "echo '{}'"]}
  - name: charge
    handler: exec
    depends_on: [ok]
    retry: {max_attempts: 1}
    config: {command: [/bin/sh, -c, "echo card declined >&2; exit 3"]}
  - name: ship
    handler: exec
    depends_on: [charge]
    config: {command: [/bin/sh, -c, "echo '{}'"]}
`

func TestRunDAGJSON(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := writeFile(t, dir, "dag.yaml", dagYAML)
	db := filepath.Join(dir, "weft.db")

	r := weftCLI(t, "run", file, "--db", db, "--input", `{"base": 2}`, "--json")
	requireCode(t, 0, r)
	task := decodeTask(t, r.stdout)
	require.Equal(t, state.TaskCompleted, task.State)
	require.Equal(t, "test", task.Namespace)
	require.Equal(t, "dag", task.Workflow)
	require.Len(t, task.Steps, 3)
	require.JSONEq(t, `{"n": 3}`, string(stepByName(t, task, "a").Result))
	require.JSONEq(t, `{"doubled": 6}`, string(stepByName(t, task, "b").Result))
	require.JSONEq(t, `{"sum": 9}`, string(stepByName(t, task, "c").Result))
	for _, s := range task.Steps {
		require.Equal(t, 1, s.Attempts, s.Name)
	}
	// The progress went to stderr.
	require.Contains(t, r.stderr, "step c completed")
	require.Contains(t, r.stderr, "task 1 completed in")
}

func TestRunPlainProgress(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := writeFile(t, dir, "dag.yaml", dagYAML)

	// Flags before the file, the input from stdin.
	r := weftIn(t.Context(), `{"base": 5}`, "run", "--db", filepath.Join(dir, "weft.db"), file, "--input", "-")
	requireCode(t, 0, r)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Regexp(t, `^\d\d:\d\d:\d\d\.\d{3} task 1 test/dag@1 submitted \(3 steps\)$`, lines[0])
	for _, want := range []string{"step a running (attempt 1)", "step a completed in", "step b running (attempt 1)", "step c completed in"} {
		require.Contains(t, r.stdout, want)
	}
	require.Regexp(t, `task 1 completed in \S+ \(3/3 steps completed\)$`, lines[len(lines)-1])
	require.Less(t, strings.Index(r.stdout, "step a completed"), strings.Index(r.stdout, "step b running"), "a ends before b starts")
	require.Empty(t, r.stderr)
}

func TestRunFailingStep(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := writeFile(t, dir, "fail.yaml", failYAML)
	db := filepath.Join(dir, "weft.db")

	r := weftCLI(t, "run", file, "--db", db, "--json")
	requireCode(t, 1, r)
	task := decodeTask(t, r.stdout)
	require.Equal(t, state.TaskFailed, task.State)
	require.Contains(t, task.Error, "card declined")
	charge := stepByName(t, task, "charge")
	require.Equal(t, state.StepFailed, charge.State)
	require.Contains(t, charge.Error, "exit status 3")
	require.Equal(t, state.StepSkipped, stepByName(t, task, "ship").State)
	require.Contains(t, r.stderr, "step charge failed: exit status 3: card declined")
	require.Contains(t, r.stderr, "task 1 failed in")

	// Without --json, the same summary ends stdout.
	r = weftCLI(t, "run", file, "--db", db)
	requireCode(t, 1, r)
	require.Contains(t, r.stdout, `task 2 failed in`)
	require.Contains(t, r.stdout, `1 failed, 1 skipped): step "charge" failed`)
}

func TestRunRejects(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "weft.db")
	unknownKey := writeFile(t, dir, "unknown.yaml", "namespace: test\nname: x\nversion: \"1\"\nsteps:\n  - name: a\n    handler: exec\n    retrys: 3\n    config: {command: [\"true\"]}\n")
	noCommand := writeFile(t, dir, "nocommand.yaml", "namespace: test\nname: x\nversion: \"2\"\nsteps:\n  - name: a\n    handler: exec\n    config: {cmd: [\"true\"]}\n")
	goHandler := writeFile(t, dir, "gohandler.yaml", "namespace: test\nname: x\nversion: \"3\"\nsteps:\n  - name: a\n    handler: exec\n    config: {command: [\"true\"]}\n  - name: charge\n    handler: shop.charge\n    depends_on: [a]\n")
	dag := writeFile(t, dir, "dag.yaml", dagYAML)

	tests := []struct {
		name   string
		args   []string
		code   int
		stderr []string
	}{
		{"unknown key", []string{"run", unknownKey}, 2, []string{unknownKey + `:7: step "a": unknown key "retrys"`}},
		{"bad exec config", []string{"run", noCommand}, 2, []string{noCommand + `:5: step "a": config.cmd: unknown field`}},
		{"handler not in the CLI", []string{"run", goHandler}, 2, []string{goHandler + `: step "charge": handler "shop.charge" is not available in the weft CLI (built-in handlers: exec, http)`}},
		{"missing file", []string{"run", filepath.Join(dir, "nope.yaml")}, 2, []string{"nope.yaml: no such file"}},
		{"input not JSON", []string{"run", dag, "--input", "{base: 1"}, 2, []string{"--input: not valid JSON"}},
		{"input file missing", []string{"run", dag, "--input", "@" + filepath.Join(dir, "none.json")}, 2, []string{"--input: open"}},
		{"zero concurrency", []string{"run", dag, "--concurrency", "0"}, 2, []string{"--concurrency must be at least 1, got 0"}},
		{"cap without N", []string{"run", dag, "--cap", "shop"}, 2, []string{`--cap "shop": want NAMESPACE=N`}},
		{"cap below 1", []string{"run", dag, "--cap", "shop=0"}, 2, []string{`--cap "shop=0": N must be an integer of at least 1`}},
		{"no file", []string{"run"}, 2, []string{"accepts 1 arg(s), received 0", "Run 'weft run --help' for usage."}},
		{"unknown flag", []string{"run", dag, "--bogus"}, 2, []string{"unknown flag: --bogus"}},
		{"bad log level", []string{"run", dag, "--log-level", "loud"}, 2, []string{`--log-level: unknown level "loud"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := weftCLI(t, append(tt.args, "--db", db)...)
			requireCode(t, tt.code, r)
			for _, want := range tt.stderr {
				require.Contains(t, r.stderr, want)
			}
			require.Empty(t, r.stdout)
		})
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	r := weftCLI(t, "--version")
	requireCode(t, 0, r)
	require.Equal(t, "weft version "+weft.Version+"\n", r.stdout)
	require.Empty(t, r.stderr)
}

func TestUnknownCommand(t *testing.T) {
	t.Parallel()
	r := weftCLI(t, "frobnicate")
	requireCode(t, 2, r)
	require.Contains(t, r.stderr, `unknown command "frobnicate" for "weft"`)
}

func TestValidate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := writeFile(t, dir, "good.yaml", dagYAML)
	bad := writeFile(t, dir, "bad.yaml", `namespace: test
name: bad
version: "1"
steps:
  - name: a
    handler: exec
    config: {command: []}
  - name: b
    handler: exec
    depends_on: [nope]
    config: {command: ["true"]}
    timeout: soon
`)
	badConfig := writeFile(t, dir, "badconfig.yaml", `namespace: test
name: badconfig
version: "1"
steps:
  - name: fetch
    handler: http
    config: {method: GET}
`)
	goHandler := writeFile(t, dir, "gohandler.yaml", "namespace: shop\nname: checkout\nversion: \"1\"\nsteps:\n  - name: charge\n    handler: shop.charge\n")

	tests := []struct {
		name   string
		files  []string
		code   int
		stdout string
		stderr []string
	}{
		{"valid", []string{good}, 0, good + ": ok (test/dag@1, 3 steps)\n", nil},
		{"go handlers are fine", []string{goHandler}, 0, goHandler + ": ok (shop/checkout@1, 1 steps)\n", nil},
		{"invalid", []string{bad}, 2, "", []string{bad + `:12: step "b": timeout: invalid duration "soon"`}},
		{"built-in config checked", []string{badConfig}, 2, "", []string{badConfig + `:5: step "fetch": config`}},
		{"several", []string{good, badConfig}, 2, good + ": ok (test/dag@1, 3 steps)\n", []string{badConfig + ":5:"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := weftCLI(t, append([]string{"validate"}, tt.files...)...)
			requireCode(t, tt.code, r)
			require.Equal(t, tt.stdout, r.stdout)
			for _, want := range tt.stderr {
				require.Contains(t, r.stderr, want)
			}
			if tt.code != 0 {
				for _, line := range strings.Split(strings.TrimSpace(r.stderr), "\n") {
					require.Regexp(t, `^/\S+\.yaml:\d+: `, line, "every problem has file and line")
				}
			}
		})
	}

	// Every problem of bad.yaml, one per line.
	t.Run("every problem", func(t *testing.T) {
		t.Parallel()
		r := weftCLI(t, "validate", bad)
		requireCode(t, 2, r)
		require.Contains(t, r.stderr, bad+`:8: step "b": depends_on: depends on unknown step "nope"`)
		require.Contains(t, r.stderr, bad+`:12: step "b": timeout: `)
	})
}

func TestValidateTouchesNoDatabase(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := writeFile(t, dir, "good.yaml", dagYAML)
	db := filepath.Join(dir, "weft.db")
	requireCode(t, 0, weftCLI(t, "validate", good, "--db", db))
	require.NoFileExists(t, db)
}

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
		require.Regexp(t, `^ID\s+WORKFLOW\s+STATE\s+CREATED\s+FINISHED\s+ERROR$`, lines[0])
		require.Regexp(t, `^3\s+test/dag@1\s+pending\s+\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\s+-`, lines[1])
		require.Regexp(t, `^2\s+test/fail@1\s+failed\s+.*step "charge" failed: exit status 3: card declined`, lines[2])
		require.Regexp(t, `^1\s+test/dag@1\s+completed\s+`, lines[3])
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
			var tasks []store.Task
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
		require.Regexp(t, `(?m)^STEP\s+STATE\s+ATTEMPTS\s+ERROR\s+RESULT$`, r.stdout)
		require.Regexp(t, `(?m)^ok\s+completed\s+1/3\s+-\s+\{\}$`, r.stdout)
		require.Regexp(t, `(?m)^charge\s+failed\s+1/1\s+exit status 3: card declined`, r.stdout)
		require.Regexp(t, `(?m)^ship\s+skipped\s+0/3\s+`, r.stdout)
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
			ID    int64              `json:"id"`
			Steps []store.Step       `json:"steps"`
			Audit []store.AuditEntry `json:"audit"`
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
		{"cancel pending", []string{"cancel", "1"}, 0, "task 1 cancelled\n", ""},
		{"cancel again", []string{"cancel", "1"}, 1, "", "weft: task 1 is cancelled and cannot be cancelled\n"},
		{"retry cancelled", []string{"retry", "1"}, 1, "", "weft: task 1 is cancelled, only failed tasks can be retried\n"},
		{"retry failed", []string{"retry", "2"}, 0, "task 2 retried: its failed steps are queued to run again\n", ""},
		{"retry again", []string{"retry", "2"}, 1, "", "weft: task 2 is running, only failed tasks can be retried\n"},
		{"cancel missing", []string{"cancel", "42"}, 1, "", "weft: task 42: not found\n"},
		{"retry missing", []string{"retry", "42"}, 1, "", "weft: task 42: not found\n"},
		{"bad id", []string{"cancel", "0"}, 2, "", "weft: invalid task id \"0\": must be a positive integer\n"},
		{"no id", []string{"retry"}, 2, "", "weft: accepts 1 arg(s), received 0\nRun 'weft retry --help' for usage.\n"},
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
}

func TestRunLeavesOtherTasksAlone(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "weft.db")
	requireCode(t, 0, weftCLI(t, "submit", writeFile(t, dir, "dag.yaml", dagYAML), "--db", db, "--input", `{"base": 1}`))

	r := weftCLI(t, "run", filepath.Join("..", "..", "examples", "hello.yaml"), "--db", db, "--json")
	requireCode(t, 0, r)
	require.Equal(t, int64(2), decodeTask(t, r.stdout).ID)

	r = weftCLI(t, "task", "1", "--json", "--db", db)
	requireCode(t, 0, r)
	task := decodeTask(t, r.stdout)
	require.Equal(t, state.TaskPending, task.State)
	require.Nil(t, task.StartedAt)
	for _, s := range task.Steps {
		require.Zero(t, s.Attempts, "step %s ran", s.Name)
	}
}

// taskState reads a task's state through the CLI.
func taskState(ctx context.Context, db string, id int64) state.Task {
	r := weftIn(ctx, "", "task", strconv.FormatInt(id, 10), "--json", "--db", db)
	if r.code != 0 {
		return ""
	}
	var task store.Task
	if json.Unmarshal([]byte(r.stdout), &task) != nil {
		return ""
	}
	return task.State
}

func TestInterruptedRunIsResumedByWorker(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "weft.db")
	file := writeFile(t, dir, "gate.yaml", `namespace: test
name: gate
version: "1"
steps:
  - name: wait
    handler: exec
    config:
      env: {DIR: "`+dir+`"}
      command:
        - /bin/sh
        - -c
        - |
          touch "$DIR/started"
          while [ ! -f "$DIR/open" ]; do sleep 0.01; done
          echo '{"opened": true}'
  - name: after
    handler: exec
    depends_on: [wait]
    config: {command: [/bin/sh, -c, "cat"]}
`)

	// Interrupt the run while its first step runs.
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan result, 1)
	go func() { done <- weftIn(ctx, "", "run", file, "--db", db, "--drain", "50ms") }()
	require.Eventually(t, func() bool {
		_, err := os.Stat(filepath.Join(dir, "started"))
		return err == nil
	}, 10*time.Second, 5*time.Millisecond, "the first step never started")
	cancel()
	r := <-done
	requireCode(t, 130, r)
	require.Contains(t, r.stderr, "weft: interrupted; stopping")
	require.Contains(t, r.stderr, "weft: task 1 is running; it stays in "+db+" and 'weft worker' resumes it")
	require.Equal(t, state.TaskRunning, taskState(t.Context(), db, 1))

	// A worker finishes it.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "open"), nil, 0o644))
	wctx, stop := context.WithCancel(t.Context())
	defer stop()
	worker := make(chan result, 1)
	go func() { worker <- weftIn(wctx, "", "worker", "--db", db, "--drain", "5s", "--cap", "test=1") }()
	require.Eventually(t, func() bool { return taskState(t.Context(), db, 1) == state.TaskCompleted },
		10*time.Second, 10*time.Millisecond, "the worker did not finish the task")
	stop()
	r = <-worker
	requireCode(t, 0, r)
	require.Contains(t, r.stderr, `msg="worker started" db=`+db)
	require.Contains(t, r.stderr, "engine_id=")

	r = weftCLI(t, "task", "1", "--json", "--db", db)
	task := decodeTask(t, r.stdout)
	wait := stepByName(t, task, "wait")
	require.Equal(t, 2, wait.Attempts, "the interrupted attempt counts")
	require.JSONEq(t, `{"opened": true}`, string(wait.Result))
}

func TestWorkerRejects(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "weft.db")
	tests := []struct {
		args   []string
		stderr string
	}{
		{[]string{"--concurrency", "-1"}, "--concurrency must be at least 1"},
		{[]string{"--cap", "a=1,a=2"}, `namespace "a" given twice`},
		{[]string{"--cap", "=3"}, "want NAMESPACE=N"},
		{[]string{"--drain", "-1s"}, "--drain must not be negative"},
		{[]string{"extra"}, `unknown command "extra" for "weft worker"`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			t.Parallel()
			r := weftCLI(t, append([]string{"worker", "--db", db}, tt.args...)...)
			requireCode(t, 2, r)
			require.Contains(t, r.stderr, tt.stderr)
		})
	}
}

func TestHelloExample(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "weft.db")
	r := weftCLI(t, "run", filepath.Join("..", "..", "examples", "hello.yaml"), "--db", db, "--input", `{"name": "Ada"}`, "--json")
	requireCode(t, 0, r)
	task := decodeTask(t, r.stdout)
	require.Equal(t, state.TaskCompleted, task.State)
	require.JSONEq(t, `{"greeting": "Hello, Ada"}`, string(stepByName(t, task, "greet").Result))
	require.JSONEq(t, `{"message": "HELLO, ADA! (10 characters)"}`, string(stepByName(t, task, "report").Result))

	// Without input it greets the world.
	r = weftCLI(t, "run", filepath.Join("..", "..", "examples", "hello.yaml"), "--db", db, "--json")
	requireCode(t, 0, r)
	require.JSONEq(t, `{"message": "HELLO, WORLD! (12 characters)"}`, string(stepByName(t, decodeTask(t, r.stdout), "report").Result))

	r = weftCLI(t, "validate", filepath.Join("..", "..", "examples", "hello.yaml"))
	requireCode(t, 0, r)
	require.Contains(t, r.stdout, "ok (examples/hello@1, 4 steps)")
}

func TestMigrate(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "weft.db")
	for range 2 { // creating, then finding it current
		r := weftCLI(t, "migrate", "--db", db)
		requireCode(t, 0, r)
		require.Equal(t, "schema up to date\n", r.stdout)
	}
	_, err := os.Stat(db)
	require.NoError(t, err)
	r := weftCLI(t, "migrate", "--db", "mysql://localhost/x")
	requireCode(t, 1, r)
	require.Contains(t, r.stderr, `unsupported database URL scheme "mysql"`)
}
