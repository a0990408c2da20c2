package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/wire"
)

// serverArgs are the arguments each command is tried with under --server,
// and whether it works through the server (true) or refuses as local-only
// (false). Every command of the CLI must be listed: a new command decides.
var serverArgs = map[string]struct {
	args    []string
	remote  bool
	needArg bool // the listed args include a file path to rewrite
	// offline: the command uses neither a database nor a server (it
	// prints the configuration or the build), so --server changes nothing.
	offline bool
}{
	"weft config":           {offline: true},
	"weft version":          {offline: true},
	"weft cancel":           {args: []string{"1"}, remote: true},
	"weft keys create":      {args: []string{"--name", "k", "--permissions", "tasks:read"}},
	"weft keys list":        {},
	"weft keys revoke":      {args: []string{"x"}},
	"weft migrate":          {},
	"weft limit":            {args: []string{"shop", "--concurrency", "2", "--rate", "5/s"}, remote: true},
	"weft pause":            {args: []string{"shop"}, remote: true},
	"weft policies":         {remote: true},
	"weft breaker reset":    {args: []string{"shop/checkout/charge"}, remote: true},
	"weft resume":           {args: []string{"shop"}, remote: true},
	"weft register":         {args: []string{"hello.yaml"}, needArg: true, remote: true},
	"weft schedules":        {remote: true},
	"weft schedules pause":  {args: []string{"examples/nightly-report/nightly"}, remote: true},
	"weft schedules resume": {args: []string{"examples/nightly-report/nightly"}, remote: true},
	"weft schedules show":   {args: []string{"examples/nightly-report/nightly"}, remote: true},
	"weft retry":            {args: []string{"1"}, remote: true},
	"weft run":              {args: []string{"hello.yaml"}, needArg: true, remote: true},
	"weft events":           {remote: true},
	"weft serve":            {},
	"weft signal":           {args: []string{"1", "go"}, remote: true},
	"weft step":             {args: []string{"1"}, remote: true},
	"weft step resolve":     {args: []string{"1"}, remote: true},
	"weft step retry":       {args: []string{"1"}, remote: true},
	"weft submit":           {args: []string{"hello.yaml"}, needArg: true, remote: true},
	"weft task":             {args: []string{"1"}, remote: true},
	"weft tasks":            {remote: true},
	"weft validate":         {args: []string{"hello.yaml"}, needArg: true, remote: true},
	"weft worker":           {},
	"weft ui":               {},
	"weft webhooks create":  {args: []string{"--url", "http://hooks.example/x"}, remote: true},
	"weft webhooks delete":  {args: []string{"1"}, remote: true},
	"weft webhooks enable":  {args: []string{"1"}, remote: true},
	"weft webhooks list":    {remote: true},
	"weft delete":           {args: []string{"--state", "cancelled"}, remote: true},
	"weft prune":            {args: []string{"--state", "completed", "--older-than", "7d"}, remote: true},
	"weft retention":        {remote: true},
	"weft workers":          {remote: true},
	"weft oplog":            {remote: true},
}

// leafCommands lists the runnable commands of the CLI by path.
func leafCommands(c *cobra.Command) []string {
	var out []string
	if c.Runnable() && c.Name() != "help" {
		out = append(out, c.CommandPath())
	}
	for _, sub := range c.Commands() {
		if sub.Name() == "help" || sub.Hidden {
			continue
		}
		out = append(out, leafCommands(sub)...)
	}
	sort.Strings(out)
	return out
}

// TestServerFlagEveryCommand: every command given --server either talks to
// the server (here an address where nothing listens, so it fails naming
// it) or refuses as local-only with exit status 2; none opens or creates
// the local database.
func TestServerFlagEveryCommand(t *testing.T) {
	t.Parallel()
	root := newApp(nil, nil, nil, os.Getenv).rootCommand()
	var listed []string
	for name := range serverArgs {
		listed = append(listed, name)
	}
	sort.Strings(listed)
	require.Equal(t, listed, leafCommands(root), "every command says whether it works through --server")

	hello, err := filepath.Abs(filepath.Join("..", "..", "examples", "hello.yaml"))
	require.NoError(t, err)
	const nowhere = "http://127.0.0.1:1"
	for name, tc := range serverArgs {
		t.Run(strings.ReplaceAll(name, " ", "_"), func(t *testing.T) {
			t.Parallel()
			db := filepath.Join(t.TempDir(), "weft.db")
			args := append([]string{}, strings.Fields(name)[1:]...)
			for _, a := range tc.args {
				if tc.needArg && a == "hello.yaml" {
					a = hello
				}
				args = append(args, a)
			}
			// The database comes from the environment, as a shell's
			// does: --db with --server names two places (below).
			env := func(k string) string {
				if k == "WEFT_DB" {
					return db
				}
				return ""
			}
			var stdout, stderr syncBuffer
			code := newApp(strings.NewReader(""), &stdout, &stderr, env).execute(t.Context(), append([]string{"--server", nowhere}, args...))
			r := result{code: code, stdout: stdout.String(), stderr: stderr.String()}
			if tc.offline {
				requireCode(t, 0, r)
			} else if tc.remote {
				require.NotEqual(t, 0, r.code, "nothing listens at %s", nowhere)
				require.Contains(t, r.stderr, "127.0.0.1:1", "the error names the server")
				r = weftCLI(t, append([]string{"--db", db, "--server", nowhere}, args...)...)
				requireCode(t, 2, r)
				require.Contains(t, r.stderr, "would not open the database that --db names")
			} else {
				requireCode(t, 2, r)
				require.Contains(t, r.stderr, "cannot go through --server")
			}
			require.NoFileExists(t, db, "the local database is never opened")
		})
	}
	t.Run("env", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		env := func(k string) string {
			if k == "WEFT_SERVER" {
				return nowhere
			}
			return ""
		}
		var stdout, stderr syncBuffer
		code := newApp(strings.NewReader(""), &stdout, &stderr, env).execute(t.Context(), []string{"--db", filepath.Join(dir, "weft.db"), "keys", "list"})
		require.Equal(t, 2, code, stderr.String())
		require.Contains(t, stderr.String(), "cannot go through $WEFT_SERVER")
		require.NoFileExists(t, filepath.Join(dir, "weft.db"))
	})
}

// TestServerSignalAndSteps: signal, step, step retry and step resolve go
// through the server, and the audit trail names the key.
func TestServerSignalAndSteps(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "weft.db")
	token := createKey(t, db, "ops", "tasks:*,workflows:*,steps:*")
	url, _ := startServe(t, db)
	as := func(args ...string) result {
		return weftCLI(t, append([]string{"--server", url, "--token", token}, args...)...)
	}
	gate := writeFile(t, dir, "gate.yaml", `namespace: ops
name: gate
version: "1"
steps:
  - name: approval
    type: signal
    signal: {name: go_live}
  - name: flaky
    handler: exec
    depends_on: [approval]
    retry: {max_attempts: 1}
    config:
      command: [/bin/sh, -c, 'exit 3']
  - name: after
    handler: exec
    depends_on: [flaky]
    config:
      command: [cat]
`)
	r := as("submit", gate)
	requireCode(t, 0, r)
	id := strings.TrimSpace(r.stdout)

	r = as("signal", id, "go_live", "--payload", `{"by":"ops"}`)
	requireCode(t, 0, r)
	require.Regexp(t, `signal go_live (delivered to|kept for) task `+id, r.stdout)
	requireCode(t, 2, as("signal", id, "go_live", "--payload", `{nope`))

	task := waitCLITask(t, as, id, func(task *wire.Task) bool { return task.State.Terminal() })
	require.Equal(t, state.TaskFailed, task.State)
	flaky := stepByName(t, task, "flaky")
	sid := strconv.FormatInt(flaky.ID, 10)

	r = as("step", sid)
	requireCode(t, 0, r)
	require.Regexp(t, `(?m)^State:\s+failed`, r.stdout)
	require.Regexp(t, `(?m)^Error:\s+exit status 3`, r.stdout)
	r = as("step", "424242")
	requireCode(t, 1, r)
	require.Contains(t, r.stderr, "step 424242: not found")

	requireCode(t, 0, as("step", "retry", sid, "--reason", "try once more"))
	task = waitCLITask(t, as, id, func(task *wire.Task) bool { return task.State.Terminal() })
	require.Equal(t, state.TaskFailed, task.State, "it fails again")
	r = as("task", id, "--json", "--audit")
	requireCode(t, 0, r)
	var withAudit struct {
		Audit []wire.AuditEntry `json:"audit"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &withAudit))
	var retried bool
	for _, e := range withAudit.Audit {
		retried = retried || (e.Step == "flaky" && e.From == "failed" && e.To == "ready" && e.EngineID == "api:ops" && e.Reason == "try once more")
	}
	require.True(t, retried, "the retry is audited with the key and reason: %s", r.stdout)

	requireCode(t, 2, as("step", "resolve", sid, "--result", `{bad`))
	r = as("step", "resolve", sid, "--result", `{"manual":true}`, "--reason", "done by hand")
	requireCode(t, 0, r)
	task = waitCLITask(t, as, id, func(task *wire.Task) bool { return task.State.Terminal() })
	require.Equal(t, state.TaskCompleted, task.State)
	require.Equal(t, state.StepResolved, stepByName(t, task, "flaky").State)
	r = as("step", "resolve", sid)
	requireCode(t, 1, r)
	require.Contains(t, r.stderr, "resolved")
}

// waitCLITask polls `task --json` until done says the task is there.
func waitCLITask(t *testing.T, as func(...string) result, id string, done func(*wire.Task) bool) *wire.Task {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := as("task", id, "--json")
		requireCode(t, 0, r)
		var task wire.Task
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &task))
		if done(&task) {
			return &task
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s: still %s", id, task.State)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRunAndEventsThroughServer: `weft run --server` registers, submits and
// follows its task through the server's event stream; `weft events` prints
// a task's events from the server and from the database alike.
func TestRunAndEventsThroughServer(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "weft.db")
	token := createKey(t, db, "runner", "tasks:*,workflows:*")
	url, _ := startServe(t, db)
	as := func(args ...string) result {
		return weftCLI(t, append([]string{"--server", url, "--token", token}, args...)...)
	}
	hello := filepath.Join("..", "..", "examples", "hello.yaml")

	r := as("run", hello, "--input", `{"name":"Ada"}`, "--json")
	requireCode(t, 0, r)
	task := decodeTask(t, r.stdout)
	require.Equal(t, state.TaskCompleted, task.State)
	require.JSONEq(t, `{"message": "HELLO, ADA! (10 characters)"}`, string(stepByName(t, task, "report").Result))
	require.Contains(t, r.stderr, "completed", "the progress went to stderr")

	failing := writeFile(t, dir, "failing.yaml", "namespace: ops\nname: failing\nversion: \"1\"\nsteps:\n  - name: s\n    handler: exec\n    retry: {max_attempts: 1}\n    config:\n      command: [/bin/sh, -c, 'exit 4']\n")
	r = as("run", failing)
	requireCode(t, 1, r)
	require.Contains(t, r.stdout, "failed")
	requireCode(t, 2, as("run", hello, "--concurrency", "3"))

	id := strconv.FormatInt(task.ID, 10)
	for name, run := range map[string]func(...string) result{
		"server": as,
		"local":  func(args ...string) result { return weftCLI(t, append([]string{"--db", db}, args...)...) },
	} {
		r = run("events", "--task", id, "--after", "start", "--json")
		requireCode(t, 0, r)
		var types []string
		for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
			var ev wire.Event
			require.NoError(t, json.Unmarshal([]byte(line), &ev), "%s: %s", name, line)
			require.Equal(t, task.ID, ev.TaskID)
			types = append(types, ev.Type)
		}
		require.Contains(t, types, "task.submitted", name)
		require.Equal(t, "task.completed", types[len(types)-1], "%s: it stops at the task's end", name)

		r = run("events", "--task", id, "--after", "start")
		requireCode(t, 0, r)
		require.Regexp(t, `(?m)task\.completed\s+examples/hello\s+task `+id, r.stdout, name)
		r = run("events", "--after", "bogus", "--task", id)
		requireCode(t, 2, r)
		r = run("events", "--task", "424242")
		requireCode(t, 1, r)
		require.Contains(t, r.stderr, "task 424242: not found", name)
	}
}
