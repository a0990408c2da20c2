package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"
)

// testSettings are settings of each kind and flag type.
var testSettings = []Setting{
	{Key: "log.level", Flag: "log-level", Env: "WEFT_LOG_LEVEL"},
	{Key: "db", Flag: "db", Env: "WEFT_DB"},
	{Key: "engine.concurrency", Flag: "concurrency", Env: "WEFT_CONCURRENCY"},
	{Key: "engine.drain", Flag: "drain", Env: "WEFT_DRAIN"},
	{Key: "engine.max_pressure", Flag: "max-pressure", Env: "WEFT_MAX_PRESSURE", Kind: Map},
	{Key: "serve.insecure_no_auth", Flag: "insecure-no-auth", Env: "WEFT_INSECURE_NO_AUTH"},
	{Key: "token", Flag: "token", Env: "WEFT_TOKEN", Secret: true},
	{Key: "telemetry.sampler", Env: "OTEL_TRACES_SAMPLER"},
	{Key: "serve.addr", Flag: "addr", Env: "WEFT_ADDR", Commands: []string{"serve"}},
}

// testFlags declares the flags of testSettings.
func testFlags() *pflag.FlagSet {
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	fs.String("log-level", "", "")
	fs.String("db", "", "")
	fs.Int("concurrency", 1, "")
	fs.Duration("drain", time.Second, "")
	fs.StringSlice("max-pressure", nil, "")
	fs.Bool("insecure-no-auth", false, "")
	fs.String("token", "", "")
	return fs
}

// secretFile writes content to a file and returns its path.
func secretFile(t *testing.T, dir, content string) string {
	t.Helper()
	path := filepath.Join(dir, "secret")
	require.NoError(t, os.WriteFile(path, []byte(content+"\n"), 0o600))
	return path
}

// TestResolveErrorNamesTheReference: a value a flag refuses is quoted as
// the configuration file writes it, naming the ${file:PATH} or ${VAR}
// that made it, never with what that held.
func TestResolveErrorNamesTheReference(t *testing.T) {
	t.Parallel()
	const content = "hunter2-TOPSECRET"
	tests := []struct {
		name, yaml string // {secret}: the secret file's path
		env        map[string]string
		want       string // {file}: the configuration file's path
		leak       string // not in the error
	}{
		{name: "int from a file", yaml: "engine:\n  concurrency: ${file:{secret}}\n",
			want: `engine.concurrency ({file}:2): invalid argument "${file:{secret}}" for --concurrency: want an integer`, leak: content},
		{name: "duration from a file", yaml: "engine:\n  drain: ${file:{secret}}\n",
			want: `engine.drain ({file}:2): invalid argument "${file:{secret}}" for --drain: want a duration such as "30s"`, leak: content},
		{name: "bool from a file", yaml: "serve:\n  insecure_no_auth: ${file:{secret}}\n",
			want: `serve.insecure_no_auth ({file}:2): invalid argument "${file:{secret}}" for --insecure-no-auth: want true or false`, leak: content},
		{name: "map item from a file", yaml: "engine:\n  max_pressure: {cpu: \"\\\"${file:{secret}}\"}\n",
			want: `engine.max_pressure ({file}:2): invalid argument "cpu=\"${file:{secret}}" for --max-pressure: want a comma-separated list`, leak: content},
		{name: "int from a variable", yaml: "engine:\n  concurrency: x${PASSWORD}\n", env: map[string]string{"PASSWORD": content},
			want: `engine.concurrency ({file}:2): invalid argument "x${PASSWORD}" for --concurrency: want an integer`, leak: content},
		{name: "int as written", yaml: "engine:\n  concurrency: lots\n",
			want: `engine.concurrency ({file}:2): invalid argument "lots" for --concurrency: want an integer`},
		{name: "int out of range", yaml: "engine:\n  concurrency: 99999999999999999999\n",
			want: `engine.concurrency ({file}:2): invalid argument "99999999999999999999" for --concurrency: out of range`},
		{name: "int from the environment", env: map[string]string{"WEFT_CONCURRENCY": "lots"},
			want: `engine.concurrency (env WEFT_CONCURRENCY): invalid argument "lots" for --concurrency: want an integer`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			secret := secretFile(t, dir, content)
			path := filepath.Join(dir, "weft.yaml")
			fill := strings.NewReplacer("{secret}", secret, "{file}", path)
			require.NoError(t, os.WriteFile(path, []byte(fill.Replace(tt.yaml)), 0o600))
			_, err := Resolve(path, true, testSettings, nil, testFlags(), "test", env(tt.env))
			require.Error(t, err)
			require.Equal(t, fill.Replace(tt.want), err.Error())
			if tt.leak != "" {
				require.NotContains(t, err.Error(), tt.leak)
			}
		})
	}
}

// TestShow: an error quotes a setting's value as the configuration file
// writes it, and a value from anywhere else as it is; a secret setting's
// not at all.
func TestShow(t *testing.T) {
	t.Parallel()
	const content = "hunter2-TOPSECRET"
	dir := t.TempDir()
	secret := secretFile(t, dir, content)
	path := filepath.Join(dir, "weft.yaml")
	require.NoError(t, os.WriteFile(path, []byte(strings.ReplaceAll(`log:
  level: ${file:{secret}}
db: postgres://weft:${PASSWORD}@db/weft
engine:
  max_pressure: {cpu: "${file:{secret}}", io: 50}
token: ${file:{secret}}
telemetry:
  sampler: $${literal}
serve:
  addr: ${file:{secret}}
`, "{secret}", secret)), 0o600))
	flags := testFlags()
	require.NoError(t, flags.Parse([]string{"--drain", "3s"}))
	c, err := Resolve(path, true, testSettings, nil, flags, "test", env(map[string]string{"PASSWORD": content, "WEFT_CONCURRENCY": "4"}))
	require.NoError(t, err)
	tests := []struct {
		name    string
		c       *Layers
		setting string
		v       string
		want    string
	}{
		{name: "from a file, by key", c: c, setting: "log.level", v: content, want: "${file:" + secret + "}"},
		{name: "from a file, by flag", c: c, setting: "log-level", v: content, want: "${file:" + secret + "}"},
		{name: "from a file, by variable", c: c, setting: "WEFT_LOG_LEVEL", v: content, want: "${file:" + secret + "}"},
		{name: "a value made from it", c: c, setting: "log-level", v: "hunter2", want: "${file:" + secret + "}"},
		{name: "from a variable", c: c, setting: "db", v: "postgres://weft:" + content + "@db/weft", want: "postgres://weft:${PASSWORD}@db/weft"},
		{name: "an item", c: c, setting: "max-pressure", v: "cpu=" + content, want: "cpu=${file:" + secret + "}"},
		{name: "another item", c: c, setting: "max-pressure", v: "io=50", want: "io=50"},
		{name: "not an item", c: c, setting: "max-pressure", v: content, want: "cpu=${file:" + secret + "},io=50"},
		{name: "as written", c: c, setting: "telemetry.sampler", v: "${literal}", want: "$${literal}"},
		{name: "a secret setting", c: c, setting: "token", v: content, want: "[redacted]"},
		{name: "from the environment", c: c, setting: "concurrency", v: "4", want: "4"},
		{name: "from a flag", c: c, setting: "drain", v: "3s", want: "3s"},
		{name: "the default", c: c, setting: "insecure-no-auth", v: "false", want: "false"},
		{name: "no setting", c: c, setting: "TRACEPARENT", v: "00-x", want: "00-x"},
		{name: "another command's setting, by key", c: c, setting: "serve.addr", v: content, want: "${file:" + secret + "}"},
		{name: "another command's flag", c: c, setting: "addr", v: "127.0.0.1:1", want: "127.0.0.1:1"},
		{name: "no configuration", setting: "log-level", v: "loud", want: "loud"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, tt.c.Show(tt.setting, tt.v))
		})
	}
	require.Equal(t, "--log-level (log.level at "+path+":2)", c.Describe("log-level"))
	require.Equal(t, "--addr", c.Describe("addr"), "the command's own --addr is not serve.addr")
}
