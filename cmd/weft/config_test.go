package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// configLine returns the value and source "weft config" printed for key.
func configLine(t *testing.T, out, key string) (value, source string) {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(key) + `\s+(.*?)\s+# (.*)$`).FindStringSubmatch(out)
	require.NotNil(t, m, "no %s in:\n%s", key, out)
	return m[1], m[2]
}

// TestConfigPrecedence: defaults < the file < the environment < flags,
// with the file's interpolations, as "weft config" reports them.
func TestConfigPrecedence(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "token"), []byte("tok-from-file\n"), 0o600))
	file := writeFile(t, dir, "weft.yaml", `# weft settings
db: postgres://weft:${DB_PASSWORD}@db.internal/weft
token: ${file:token}
log:
  format: json
engine:
  concurrency: 4
  max_pressure:
    io: 50
    cpu: 80
serve:
  addr: ${ADDR:-0.0.0.0:8080}
  jwt:
    issuer: https://issuer.example
telemetry:
  traces_exporter: console
`)
	tests := []struct {
		name   string
		env    map[string]string
		args   []string
		key    string
		value  string
		source string
	}{
		{name: "default", key: "serve.max_body", value: "1048576", source: "default"},
		{name: "default of a persistent flag", key: "log.level", value: "warn (info for worker and serve)", source: "default"},
		{name: "file", key: "engine.concurrency", value: "4", source: file + ":7"},
		{name: "file map", key: "engine.max_pressure", value: "cpu=80,io=50", source: file + ":8"},
		{name: "file nested", key: "serve.jwt.issuer", value: "https://issuer.example", source: file + ":14"},
		{name: "file default interpolation", key: "serve.addr", value: "0.0.0.0:8080", source: file + ":12"},
		{name: "file env interpolation", env: map[string]string{"ADDR": "127.0.0.1:9"}, key: "serve.addr", value: "127.0.0.1:9", source: file + ":12"},
		{name: "env over file", env: map[string]string{"WEFT_CONCURRENCY": "6"}, key: "engine.concurrency", value: "6", source: "env WEFT_CONCURRENCY"},
		{name: "flag over env", env: map[string]string{"WEFT_LOG_FORMAT": "text"}, args: []string{"--log-format", "json"}, key: "log.format", value: "json", source: "flag --log-format"},
		{name: "env over file, persistent", env: map[string]string{"WEFT_LOG_FORMAT": "text"}, key: "log.format", value: "text", source: "env WEFT_LOG_FORMAT"},
		{name: "password redacted", key: "db", value: "postgres://weft:***@db.internal/weft", source: file + ":2"},
		{name: "file secret redacted", key: "token", value: "[redacted]", source: file + ":3"},
		{name: "env secret redacted", env: map[string]string{"WEFT_TOKEN": "tok-env"}, key: "token", value: "[redacted]", source: "env WEFT_TOKEN"},
		{name: "telemetry from file", key: "telemetry.traces_exporter", value: "console", source: file + ":16"},
		{name: "telemetry from env", env: map[string]string{"OTEL_TRACES_EXPORTER": "none"}, key: "telemetry.traces_exporter", value: "none", source: "env OTEL_TRACES_EXPORTER"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			env := map[string]string{"WEFT_CONFIG": file, "DB_PASSWORD": "pw-secret"}
			for k, v := range tt.env {
				env[k] = v
			}
			var stdout, stderr syncBuffer
			code := newApp(strings.NewReader(""), &stdout, &stderr, func(k string) string { return env[k] }).
				execute(t.Context(), append([]string{"config"}, tt.args...))
			require.Equal(t, 0, code, stderr.String())
			value, source := configLine(t, stdout.String(), tt.key)
			require.Equal(t, tt.value, value)
			require.Equal(t, tt.source, source)
			require.NotContains(t, stdout.String(), "pw-secret")
			require.NotContains(t, stdout.String(), "tok-")
		})
	}
}

// TestConfigApplies: what the file sets reaches the commands, under the
// environment and flags.
func TestConfigApplies(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "weft.db")
	cfg := writeFile(t, dir, "weft.yaml", "db: "+db+"\nlog:\n  format: json\n  level: info\nengine:\n  concurrency: 0\n")
	tpl := writeFile(t, dir, "hello.yaml", "namespace: test\nname: hi\nversion: \"1\"\nsteps:\n  - name: a\n    handler: exec\n    config: {command: [\"true\"]}\n")

	r := weftCLI(t, "--config", cfg, "run", tpl)
	requireCode(t, 2, r)
	require.Contains(t, r.stderr, "--concurrency (engine.concurrency at "+cfg+":6) must be from 1 to 100000", "the file's concurrency is the command's")
	// The server's settings name their source too.
	srvCfg := writeFile(t, dir, "serve.yaml", "db: "+db+"\nserve:\n  max_body: 0\n")
	r = weftCLI(t, "--config", srvCfg, "serve")
	requireCode(t, 2, r)
	require.Contains(t, r.stderr, "--max-body (serve.max_body at "+srvCfg+":3) must be at least 1, got 0")

	r = weftCLI(t, "--config", cfg, "run", tpl, "--concurrency", "2")
	requireCode(t, 0, r)
	require.Regexp(t, `(?m)^\{.*"msg":"engine started"`, r.stderr, "the file's log format and level apply")
	require.FileExists(t, db, "the file's database is used")
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tests := []struct {
		name, yaml string
		env        map[string]string
		want       string
	}{
		{"unknown key", "db: x\nserve:\n  adress: y\n", nil, `weft.yaml:3: unknown key "serve.adress"`},
		{"unset variable", "db: ${NOPE}\n", nil, "weft.yaml:1: db: ${NOPE}: NOPE is not set"},
		{"bad value", "serve:\n  max_body: lots\n", nil, `serve.max_body (` + filepath.Join(dir, "bad value", "weft.yaml") + `:2): invalid argument "lots"`},
		{"bad env value", "", map[string]string{"WEFT_MAX_BODY": "lots"}, `serve.max_body (env WEFT_MAX_BODY): invalid argument "lots"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			sub := filepath.Join(dir, tt.name)
			require.NoError(t, os.MkdirAll(sub, 0o755))
			file := writeFile(t, sub, "weft.yaml", tt.yaml)
			env := map[string]string{"WEFT_CONFIG": file}
			for k, v := range tt.env {
				env[k] = v
			}
			for _, args := range [][]string{{"serve", "--addr", "127.0.0.1:0"}, {"config"}} {
				// The command that takes the value refuses it, and so does
				// 'weft config', after it printed the settings.
				var stdout, stderr syncBuffer
				code := newApp(strings.NewReader(""), &stdout, &stderr, func(k string) string { return env[k] }).
					execute(t.Context(), args)
				require.Equal(t, exitUsage, code, "%v", args)
				require.Contains(t, stderr.String(), tt.want, "%v", args)
			}
		})
	}
	r := weftCLI(t, "--config", filepath.Join(dir, "absent.yaml"), "config")
	requireCode(t, 2, r)
	require.Contains(t, r.stderr, "absent.yaml does not exist")
}

// TestConfigDefaultFile: weft.yaml in the working directory is read
// without being named (not parallel: it changes directory).
func TestConfigDefaultFile(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	writeFile(t, dir, "weft.yaml", "engine:\n  concurrency: 3\n")
	r := weftIn(t.Context(), "", "config")
	requireCode(t, 0, r)
	value, source := configLine(t, r.stdout, "engine.concurrency")
	require.Equal(t, "3", value)
	require.Equal(t, "weft.yaml:2", source)
	require.Contains(t, r.stdout, "# configuration file: weft.yaml")
}

// TestConfigServerIsAmbient: a server set in the configuration file is
// used by the commands that talk to one, and refused, naming the file, by
// those that work on a database only, as $WEFT_SERVER is.
func TestConfigServerIsAmbient(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := writeFile(t, dir, "weft.yaml", "server: http://127.0.0.1:1\n")
	db := filepath.Join(dir, "weft.db")
	r := weftCLI(t, "--config", file, "--db", db, "keys", "list")
	requireCode(t, 2, r)
	require.Contains(t, r.stderr, "cannot go through the server set in "+file+":1")
	r = weftCLI(t, "--config", file, "--db", db, "tasks")
	requireCode(t, 2, r)
	require.Contains(t, r.stderr, "goes through the server given by --server (server at "+file+":1), so it would not open the database that --db names")
	r = weftCLI(t, "--config", file, "tasks")
	require.NotEqual(t, 0, r.code)
	require.Contains(t, r.stderr, "127.0.0.1:1", "tasks goes to the file's server")
	require.NoFileExists(t, db)
}
