package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/internal/config"
)

// secretStepYAML has an exec step that names a secret no engine has.
const secretStepYAML = `namespace: test
name: secret
version: "1"
steps:
  - name: a
    handler: exec
    retry: {max_attempts: 1}
    config: {command: ["true"], env: {T: "${secret:NONE}"}}
`

// TestConfigErrorsNameTheReference: every setting of the configuration
// file, set with ${file:PATH} to a secret-looking value that is invalid
// for it, is refused by an error that names the reference, never with
// the file's content (not even made into another value, as "got 0s"). A
// setting that takes any value is quoted by no error. The table has every
// setting.
func TestConfigErrorsNameTheReference(t *testing.T) {
	t.Parallel()
	const secret = "hunter2-TOPSECRET"
	// {dir} in args is a directory of the test's own.
	configCmd := []string{"config"}
	engine := []string{"worker", "--db", "{dir}/weft.db"}
	serve := []string{"serve", "--db", "{dir}/weft.db", "--addr", "127.0.0.1:0"}
	jwt := map[string]string{"WEFT_JWT_ISSUER": "https://issuer.example", "WEFT_JWT_AUDIENCE": "weft"}
	tests := []struct {
		key     string            // the setting
		content string            // the file's content; "" for secret
		env     map[string]string // other settings
		args    []string          // the command
		// unquoted: no error quotes the setting's value (it takes any
		// value, or its error does not quote it).
		unquoted bool
		// made: what the command made of the content, which the error
		// must not show either.
		made string
	}{
		{key: "db", content: "/nonexistent/" + secret + "/weft.db", args: []string{"tasks"}},
		{key: "server", args: []string{"tasks"}},
		{key: "token", args: configCmd, unquoted: true},
		{key: "log.level", args: configCmd},
		{key: "log.format", args: configCmd},
		{key: "secrets.dir", content: "/nonexistent/" + secret, args: []string{"run", "{dir}/secret.yaml", "--db", "{dir}/weft.db"}},
		{key: "engine.concurrency", args: engine},
		{key: "engine.concurrency", content: "0", args: engine, made: "got 0"},
		{key: "engine.namespaces", content: secret + "/not-a-name", args: engine},
		{key: "engine.drain", args: engine},
		{key: "engine.max_pressure", args: engine},
		{key: "engine.max_pressure", content: "500", args: engine, made: "cpu=500"},
		{key: "engine.lease_ttl", args: engine},
		{key: "engine.lease_ttl", content: "1s", args: engine, made: "(1s)"},
		{key: "engine.heartbeat_interval", args: engine},
		{key: "engine.heartbeat_interval", content: "0s", args: engine, made: "got 0s"},
		{key: "engine.stale_after", args: engine},
		{key: "engine.stale_after", content: "-5m", args: engine, made: "got -5m0s"},
		{key: "engine.stale_after", args: []string{"migrate", "--db", "{dir}/weft.db"}},
		{key: "worker.metrics_addr", args: engine},
		{key: "worker.metrics_addr", content: "127.0.0.1:99999", args: engine, made: "99999"},
		{key: "serve.addr", args: []string{"serve", "--db", "{dir}/weft.db"}},
		{key: "serve.addr", content: "127.0.0.1:99999", args: []string{"serve", "--db", "{dir}/weft.db"}, made: "99999"},
		{key: "serve.metrics_addr", args: []string{"serve", "--db", "{dir}/weft.db"}},
		{key: "serve.metrics_addr", content: "127.0.0.1:99999", args: []string{"serve", "--db", "{dir}/weft.db", "--addr", "127.0.0.1:0"}, made: "99999"},
		{key: "serve.insecure_no_auth", args: serve},
		{key: "serve.max_body", args: serve},
		{key: "serve.max_backlog", args: serve},
		{key: "serve.request_timeout", args: serve},
		{key: "serve.max_poll", args: serve},
		{key: "serve.jwt.issuer", args: serve, unquoted: true},
		{key: "serve.jwt.audience", args: serve, unquoted: true},
		{key: "serve.jwt.public_key", content: "/nonexistent/" + secret + ".pem", env: jwt, args: serve},
		{key: "serve.jwt.jwks_url", content: secret + " is no URL", env: jwt, args: serve},
		{key: "serve.jwt.namespaces_claim", content: secret + " claim", env: map[string]string{"WEFT_JWT_ISSUER": "https://issuer.example",
			"WEFT_JWT_AUDIENCE": "weft", "WEFT_JWT_JWKS_URL": "https://issuer.example/jwks"}, args: serve},
		{key: "serve.tls.cert", content: "/nonexistent/" + secret + ".pem", env: map[string]string{"WEFT_TLS_KEY": "/nonexistent/key.pem"}, args: serve},
		{key: "serve.tls.key", content: "/nonexistent/" + secret + ".pem", env: map[string]string{"WEFT_TLS_CERT": "/nonexistent/cert.pem"}, args: serve},
		{key: "serve.trusted_proxies", args: serve},
		{key: "telemetry.traces_exporter", args: configCmd},
		{key: "telemetry.otlp_endpoint", content: "http://" + secret + " %zz", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, args: configCmd},
		{key: "telemetry.otlp_headers", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, args: configCmd, unquoted: true},
		{key: "telemetry.service_name", args: configCmd, unquoted: true},
		{key: "telemetry.sampler", env: map[string]string{"OTEL_TRACES_EXPORTER": "console"}, args: configCmd},
		{key: "telemetry.sampler_arg", env: map[string]string{"OTEL_TRACES_EXPORTER": "console", "OTEL_TRACES_SAMPLER": "traceidratio"}, args: configCmd},
	}
	covered := map[string]bool{}
	for _, tt := range tests {
		covered[tt.key] = true
	}
	for _, s := range settings {
		require.True(t, covered[s.Key], "no case for %s", s.Key)
	}
	for _, tt := range tests {
		// Named by the key only: the test's directory is named after it.
		t.Run(tt.key, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			content := tt.content
			if content == "" {
				content = secret
			}
			path := writeFile(t, dir, "secret", content+"\n")
			ref := "${file:" + path + "}"
			// The setting, nested as its key says.
			var yaml strings.Builder
			parts := strings.Split(tt.key, ".")
			for i, p := range parts[:len(parts)-1] {
				yaml.WriteString(strings.Repeat("  ", i) + p + ":\n")
			}
			value := `"` + ref + `"`
			if kindOf(tt.key) == config.Map {
				value = "{cpu: " + value + "}"
			}
			yaml.WriteString(strings.Repeat("  ", len(parts)-1) + parts[len(parts)-1] + ": " + value + "\n")
			writeFile(t, dir, "secret.yaml", secretStepYAML)
			env := map[string]string{"WEFT_CONFIG": writeFile(t, dir, "weft.yaml", yaml.String())}
			for k, v := range tt.env {
				env[k] = v
			}
			args := make([]string, len(tt.args))
			for i, a := range tt.args {
				args[i] = strings.ReplaceAll(a, "{dir}", dir)
			}

			// A command that took the value would run until the deadline.
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			var stdout, stderr syncBuffer
			code := newApp(strings.NewReader(""), &stdout, &stderr, func(k string) string { return env[k] }).execute(ctx, args)
			out := stdout.String() + stderr.String()
			if strings.Contains(content, secret) {
				require.NotContains(t, out, content, "the file's content")
			}
			if tt.made != "" {
				require.NotContains(t, out, tt.made, "a value made of the file's content")
			}
			if tt.unquoted {
				return
			}
			require.NotEqual(t, 0, code, "%s is refused:\n%s", content, out)
			require.Contains(t, out, ref, "the error names the reference")
		})
	}
}

// kindOf returns the kind of the setting of key.
func kindOf(key string) config.Kind {
	for _, s := range settings {
		if s.Key == key {
			return s.Kind
		}
	}
	return config.Scalar
}

// TestConfigCommandNamesTheReference: weft config, refusing a log level
// that a file holds, names the file and not what it holds.
func TestConfigCommandNamesTheReference(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	shadow := writeFile(t, dir, "shadow", "root:$6$hunter2:19000:0:99999:7:::\n")
	file := writeFile(t, dir, "weft.yaml", "log: { level: \"${file:"+shadow+"}\" }\n")
	r := weftCLI(t, "--config", file, "config")
	requireCode(t, exitUsage, r)
	require.Contains(t, r.stderr, `--log-level (log.level at `+file+`:1): unknown level "${file:`+shadow+`}" (want debug, info, warn or error)`)
	require.NotContains(t, r.stderr+r.stdout, "hunter2")
	_, err := os.Stat(filepath.Join(dir, "weft.db"))
	require.ErrorIs(t, err, os.ErrNotExist, "weft config opens no database")
}
