package main

import (
	"bufio"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// logYAML has a step that completes and one that fails twice.
const logYAML = `namespace: test
name: logged
version: "1"
steps:
  - name: ok
    handler: exec
    config: {command: ["true"]}
  - name: broken
    handler: exec
    depends_on: [ok]
    retry: {max_attempts: 2, backoff: fixed, initial: 10ms}
    config: {command: ["sh", "-c", "exit 3"]}
`

// TestJSONLogs: with --log-format json every line on stderr that is a log
// is one JSON object, and every line about a step carries its task_id,
// workflow, step, attempt and trace_id.
func TestJSONLogs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "weft.db")
	r := weftCLI(t, "run", "--db", db, "--log-format", "json", "--log-level", "debug", writeFile(t, dir, "logged.yaml", logYAML))
	requireCode(t, 1, r)
	steps := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(r.stderr))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "{") {
			continue // the progress view
		}
		var rec map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &rec), line)
		for _, k := range []string{"time", "level", "msg"} {
			require.Contains(t, rec, k, line)
		}
		if _, ok := rec["step"]; !ok {
			continue
		}
		for _, k := range []string{"task_id", "workflow", "step", "attempt", "trace_id"} {
			require.Contains(t, rec, k, line)
		}
		require.Equal(t, "test/logged", rec["workflow"])
		require.Regexp(t, `^[0-9a-f]{32}$`, rec["trace_id"])
		steps[rec["step"].(string)+" "+rec["msg"].(string)] = true
	}
	require.True(t, steps["ok step completed"], "%v", steps)
	require.True(t, steps["broken step failed, will retry"], "%v", steps)
	require.True(t, steps["broken step failed"], "%v", steps)

	r = weftCLI(t, "tasks", "--db", db, "--log-format", "yaml")
	requireCode(t, 2, r)
	require.Contains(t, r.stderr, `--log-format: unknown format "yaml" (want text or json)`)
}

// TestJSONLogsEveryLine: each long-running command started with
// --log-format json, exporting traces to a port where nothing listens,
// writes nothing but JSON objects on stderr: its logs, the address lines
// (serving on, metrics on), the failed exports of OpenTelemetry, the
// progress of 'run --json' and the error that ends a command.
func TestJSONLogsEveryLine(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the weft binary")
	}
	t.Parallel()
	bin, err := buildWeft()
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := ln.Addr().String()
	require.NoError(t, ln.Close())

	tests := []struct {
		name string
		args []string
		// serves: the command prints the address of an API to submit to.
		serves bool
		// ends: the command ends by itself, with this exit status.
		ends bool
		code int
	}{
		{name: "worker", args: []string{"worker", "--metrics-addr", "127.0.0.1:0"}},
		{name: "serve", args: []string{"serve", "--addr", "127.0.0.1:0", "--insecure-no-auth"}, serves: true},
		{name: "ui", args: []string{"ui", "--addr", "127.0.0.1:0"}, serves: true},
		{name: "run", args: []string{"run", "--json", "TEMPLATE"}, ends: true},
		{name: "run failing", args: []string{"run", "FAILING"}, ends: true, code: 1},
		{name: "refused", args: []string{"worker", "--concurrency", "0"}, ends: true, code: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			db := filepath.Join(dir, "weft.db")
			tpl := writeFile(t, dir, "logged.yaml", "namespace: test\nname: ok\nversion: \"1\"\nsteps:\n  - name: ok\n    handler: exec\n    config: {command: [\"true\"]}\n")
			failing := writeFile(t, dir, "failing.yaml", logYAML)
			requireCode(t, 0, weftCLI(t, "--db", db, "submit", tpl))
			args := append([]string{"--db", db, "--log-format", "json", "--log-level", "debug"}, tt.args...)
			for i, a := range args {
				switch a {
				case "TEMPLATE":
					args[i] = tpl
				case "FAILING":
					args[i] = failing
				}
			}
			cmd := exec.Command(bin, args...)
			cmd.Env = append(os.Environ(), "OTEL_TRACES_EXPORTER=otlp", "OTEL_EXPORTER_OTLP_ENDPOINT=http://"+closed,
				"OTEL_EXPORTER_OTLP_TIMEOUT=200", "OTEL_BSP_SCHEDULE_DELAY=20")
			var stderr syncBuffer
			cmd.Stderr = &stderr
			require.NoError(t, cmd.Start())
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			t.Cleanup(func() { _ = cmd.Process.Kill() })

			if !tt.ends {
				if tt.serves {
					url := waitFor(t, &stderr, regexp.MustCompile(`"url":"(http://[^"]+)"`), exited)
					res, err := http.Post(url+"/v1/tasks", "application/json", strings.NewReader(`{"workflow": "test/ok"}`))
					require.NoError(t, err)
					res.Body.Close()
					require.Equal(t, http.StatusCreated, res.StatusCode)
				}
				waitFor(t, &stderr, regexp.MustCompile(`telemetry: export failed`), exited)
				require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
			}
			select {
			case err := <-exited:
				if tt.code == 0 {
					require.NoError(t, err, stderr.String())
				} else {
					var xe *exec.ExitError
					require.ErrorAs(t, err, &xe, stderr.String())
					require.Equal(t, tt.code, xe.ExitCode(), stderr.String())
				}
			case <-time.After(60 * time.Second):
				t.Fatalf("%v did not exit:\n%s", tt.args, stderr.String())
			}
			out := stderr.String()
			require.NotEmpty(t, out)
			for line := range strings.SplitSeq(strings.TrimRight(out, "\n"), "\n") {
				var rec map[string]any
				require.NoError(t, json.Unmarshal([]byte(line), &rec), "not JSON: %q\nin:\n%s", line, out)
				require.Contains(t, rec, "msg", line)
			}
		})
	}
}

// waitFor waits until re matches the output and returns its first group
// (or the match), failing if the process exits first.
func waitFor(t *testing.T, out *syncBuffer, re *regexp.Regexp, exited <-chan error) string {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			return m[len(m)-1]
		}
		select {
		case err := <-exited:
			t.Fatalf("exited (%v) before %s:\n%s", err, re, out.String())
		case <-deadline:
			t.Fatalf("no %s in:\n%s", re, out.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
}
