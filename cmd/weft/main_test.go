package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/wire"
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
func decodeTask(t *testing.T, s string) *wire.Task {
	t.Helper()
	var task wire.Task
	require.NoError(t, json.Unmarshal([]byte(s), &task), s)
	return &task
}

func stepByName(t *testing.T, task *wire.Task, name string) wire.Step {
	t.Helper()
	for _, s := range task.Steps {
		if s.Name == name {
			return s
		}
	}
	require.Failf(t, "no such step", "%s", name)
	return wire.Step{}
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
		{"input file a directory", []string{"run", dag, "--input", "@" + dir}, 2, []string{"--input: " + dir + " is a directory"}},
		{"zero concurrency", []string{"run", dag, "--concurrency", "0"}, 2, []string{"--concurrency must be from 1 to 100000, got 0"}},
		{"huge concurrency", []string{"run", dag, "--concurrency", "100000000"}, 2, []string{"--concurrency must be from 1 to 100000, got 100000000"}},
		{"namespace not served", []string{"run", dag, "--namespaces", "zzz"}, 2, []string{`--namespaces: the template's namespace "`, `is not among them`}},
		{"cap removed", []string{"run", dag, "--cap", "shop=1"}, 2, []string{`--cap was removed`, `weft limit NAMESPACE --concurrency N`}},
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
	go func() { worker <- weftIn(wctx, "", "worker", "--db", db, "--drain", "5s") }()
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
		{[]string{"--concurrency", "-1"}, "--concurrency must be from 1 to"},
		{[]string{"--cap", "a=1"}, "--cap was removed"},
		{[]string{"--drain", "-1s"}, "--drain must not be negative"},
		{[]string{"--max-pressure", "cpu"}, `--max-pressure: "cpu" is not RESOURCE=PERCENT`},
		{[]string{"--max-pressure", "=80"}, `--max-pressure: "=80" is not RESOURCE=PERCENT`},
		{[]string{"--max-pressure", "gpu=80"}, `--max-pressure: unknown resource "gpu" (want cpu, io or memory)`},
		{[]string{"--max-pressure", "cpu=101"}, "--max-pressure: cpu=101: the threshold must be a percentage from 0 to 100"},
		{[]string{"--max-pressure", "io=-5"}, "--max-pressure: io=-5: the threshold must be"},
		{[]string{"--max-pressure", "io=lots"}, "--max-pressure: io=lots: the threshold must be"},
		{[]string{"--max-pressure", "cpu=80,cpu=90"}, "--max-pressure: cpu is given twice"},
		{[]string{"--metrics-addr", "nope"}, `--metrics-addr "nope": want HOST:PORT`},
		{[]string{"--metrics-addr", ":99999"}, `--metrics-addr ":99999": want HOST:PORT, with a port from 0 to 65535`},
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
