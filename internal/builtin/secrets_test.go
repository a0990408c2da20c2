package builtin

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/internal/outcome"
)

const secretValue = "s3cr3t-\"value\"-42"

func lookup(_ context.Context, name string) (string, error) {
	if name == "TOKEN" {
		return secretValue, nil
	}
	return "", errors.New("not found")
}

// TestHTTPSecrets: headers, url and body resolve ${secret:NAME} when the
// step runs; text rendered from the task input is never resolved; a value
// quoted by an error or a result is replaced with [secret:NAME].
func TestHTTPSecrets(t *testing.T) {
	t.Parallel()
	srv, seen := recordingServer(t, http.StatusOK, nil, `{"echo": "`+strings.ReplaceAll(secretValue, `"`, `\"`)+`"}`)
	res, err := HTTP(context.Background(), srv.Client(), Request{Step: "s", Secrets: lookup,
		Input: json.RawMessage(`{"q": "${secret:TOKEN}"}`),
		Config: httpCfg(t, map[string]any{"url": srv.URL + "/x?k=${secret:TOKEN}&q={{.input.q}}", "method": "POST",
			"headers": map[string]string{"Authorization": "Bearer ${secret:TOKEN}"}, "body": `{"t": {{json (secret "TOKEN")}}}`})})
	require.NoError(t, err)
	got := <-seen
	require.Equal(t, "Bearer "+secretValue, got.header.Get("Authorization"))
	require.Contains(t, got.uri, "q=${secret:TOKEN}", "the input's text is not resolved")
	require.NotContains(t, got.uri, "k=${secret", "the template's reference is")
	body, _ := json.Marshal(map[string]string{"t": secretValue})
	require.JSONEq(t, string(body), got.body)
	require.JSONEq(t, `{"echo": "[secret:TOKEN]"}`, string(res), "the result does not quote the secret")

	// A transport error quoting the URL is redacted, and stays retryable.
	_, err = HTTP(context.Background(), nil, Request{Step: "s", Secrets: lookup,
		Config: httpCfg(t, map[string]any{"url": "http://127.0.0.1:1/?k=${secret:TOKEN}"})})
	require.Error(t, err)
	require.NotContains(t, err.Error(), secretValue)
	require.False(t, outcome.IsPermanent(err))
}

func TestSecretErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		config map[string]any
		lookup SecretLookup
		want   string
	}{
		{"unknown secret", map[string]any{"url": "http://127.0.0.1:1/", "headers": map[string]string{"X": "${secret:OTHER}"}}, lookup, "config.headers.X: secret OTHER: not found"},
		{"no secrets configured", map[string]any{"url": "http://127.0.0.1:1/${secret:TOKEN}"}, nil, "no secrets configured"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := HTTP(context.Background(), nil, Request{Step: "s", Secrets: tt.lookup, Config: httpCfg(t, tt.config)})
			require.ErrorContains(t, err, tt.want)
			require.True(t, outcome.IsPermanent(err))
		})
	}
	for _, tt := range []struct {
		config map[string]any
		want   string
	}{
		{map[string]any{"url": "http://x/", "headers": map[string]string{"A": "${secret:1BAD}"}}, "config.headers.A: ${secret:1BAD}: a secret's name is letters"},
		{map[string]any{"url": "http://x/${secret:A"}, "config.url: \"${secret:A\": ${secret:NAME} is not closed"},
		{map[string]any{"url": "http://x/", "body": "${secret:}"}, "config.body: ${secret:}"},
	} {
		require.ErrorContains(t, ValidateHTTPConfig(httpCfg(t, tt.config)), tt.want)
	}
	require.ErrorContains(t, ValidateExecConfig(json.RawMessage(`{"command": ["true"], "env": {"A": "${secret:a-b}"}}`)), "config.env.A: ${secret:a-b}")
}

// TestExecSecrets: an exec step's env resolves its secrets; what the
// command prints of them is redacted in its result and error.
func TestExecSecrets(t *testing.T) {
	t.Parallel()
	res, err := Exec(context.Background(), Request{Step: "s", Secrets: lookup,
		Config: json.RawMessage(`{"command": ["sh", "-c", "printf '%s' \"$T\""], "env": {"T": "${secret:TOKEN}"}}`)})
	require.NoError(t, err)
	require.JSONEq(t, `{"stdout": "[secret:TOKEN]"}`, string(res))
	_, err = Exec(context.Background(), Request{Step: "s", Secrets: lookup,
		Config: json.RawMessage(`{"command": ["sh", "-c", "echo \"$T\" >&2; exit 3"], "env": {"T": "${secret:TOKEN}"}}`)})
	require.ErrorContains(t, err, "[secret:TOKEN]")
	require.NotContains(t, err.Error(), secretValue)
}

// TestExecDoesNotInheritSecrets: the engine's WEFT_SECRET_ variables do
// not reach commands (not parallel: it sets the process environment).
func TestExecDoesNotInheritSecrets(t *testing.T) {
	t.Setenv("WEFT_SECRET_HIDDEN", "x")
	res, err := Exec(context.Background(), Request{Step: "s",
		Config: json.RawMessage(`{"command": ["sh", "-c", "printf '%s' \"${WEFT_SECRET_HIDDEN-unset}\""]}`)})
	require.NoError(t, err)
	require.JSONEq(t, `{"stdout": "unset"}`, string(res))
}

func TestEnvSecrets(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "TOKEN"), []byte("from-file\r\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "BIG"), []byte(strings.Repeat("x", 64<<10+1)), 0o600))
	env := map[string]string{"WEFT_SECRET_API": "from-env", "WEFT_SECRET_TOKEN": ""}
	getenv := func(k string) string { return env[k] }
	tests := []struct {
		name, dir, shownDir, secret, want, wantErr string
	}{
		{name: "environment", dir: dir, secret: "API", want: "from-env"},
		{name: "file without its newline", dir: dir, secret: "TOKEN", want: "from-file"},
		{name: "neither", dir: dir, secret: "NONE", wantErr: "no WEFT_SECRET_NONE in the engine's environment and no file NONE in " + dir},
		{name: "neither, the directory named", dir: dir, shownDir: "${SECRETS}", secret: "NONE", wantErr: "no file NONE in ${SECRETS}"},
		{name: "unreadable, the directory named", dir: filepath.Join(dir, "TOKEN"), shownDir: "${SECRETS}", secret: "NONE", wantErr: "open NONE in ${SECRETS}: not a directory"},
		{name: "no directory", secret: "NONE", wantErr: "set WEFT_SECRET_NONE in the engine's environment or use --secrets-dir"},
		{name: "too large", dir: dir, secret: "BIG", wantErr: "larger than 64 KiB"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := EnvSecrets(getenv, tt.dir, tt.shownDir)(context.Background(), tt.secret)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				if tt.shownDir != "" {
					require.NotContains(t, err.Error(), dir, "the directory is named as shown")
				}
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}
