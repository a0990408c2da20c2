package main

import (
	"bufio"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

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
