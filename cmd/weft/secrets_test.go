package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSecretNeverLeaves: a secret that http and exec steps name as
// ${secret:NAME} reaches the called service and the command, and never the
// database file, the API's responses or the logs, even when a step's
// result or error quotes it.
func TestSecretNeverLeaves(t *testing.T) {
	t.Parallel()
	const secret = "tok-5f2b9c0e-never-stored"
	dir := t.TempDir()
	db := filepath.Join(dir, "weft.db")
	secretsDir := filepath.Join(dir, "secrets")
	require.NoError(t, os.Mkdir(secretsDir, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(secretsDir, "FROM_FILE"), []byte(secret+"-file\n"), 0o600))

	var mu sync.Mutex
	var seen []string
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Authorization"))
		mu.Unlock()
		// The service echoes what it got: the step's result quotes it.
		_ = json.NewEncoder(w).Encode(map[string]string{"got": r.Header.Get("Authorization")})
	}))
	defer target.Close()
	execOut := filepath.Join(dir, "exec.out")

	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	env := map[string]string{"WEFT_DB": db, "WEFT_SECRET_API_TOKEN": secret}
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- newApp(strings.NewReader(""), &stdout, &stderr, func(k string) string { return env[k] }).execute(ctx,
			[]string{"serve", "--addr", "127.0.0.1:0", "--insecure-no-auth", "--log-level", "debug", "--log-format", "json", "--secrets-dir", secretsDir})
	}()
	re := regexp.MustCompile(`serving on (http://[^\s"]+)`)
	var base string
	require.Eventually(t, func() bool {
		if m := re.FindStringSubmatch(stderr.String()); m != nil {
			base = m[1]
		}
		return base != ""
	}, 10*time.Second, 5*time.Millisecond, "serve did not start: %s", stderr.String())

	var responses bytes.Buffer
	call := func(method, path string, body any) map[string]any {
		var rd io.Reader
		if body != nil {
			b, err := json.Marshal(body)
			require.NoError(t, err)
			rd = bytes.NewReader(b)
		}
		req, err := http.NewRequestWithContext(t.Context(), method, base+path, rd)
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Less(t, resp.StatusCode, 300, "%s %s: %s", method, path, b)
		responses.Write(b)
		var out map[string]any
		_ = json.Unmarshal(b, &out)
		return out
	}
	template := `namespace: sec
name: calls
version: "1"
steps:
  - name: call
    handler: http
    config:
      url: ` + target.URL + `/echo
      headers: {Authorization: "Bearer ${secret:API_TOKEN}"}
  - name: run
    handler: exec
    config:
      command: ["sh", "-c", "printf '%s|%s' \"$TOKEN\" \"$OTHER\" > ` + execOut + `; echo \"token is $TOKEN\" >&2; exit 3"]
      env: {TOKEN: "${secret:API_TOKEN}", OTHER: "${secret:FROM_FILE}"}
    retry: {max_attempts: 1}
  - name: unreachable
    handler: http
    config: {url: "http://127.0.0.1:1/?key=${secret:API_TOKEN}"}
    retry: {max_attempts: 1}
`
	call("POST", "/v1/workflows", map[string]string{"template": template})
	task := call("POST", "/v1/tasks", map[string]any{"workflow": "sec/calls"})
	id := int64(task["id"].(float64))
	path := "/v1/tasks/" + jsonNumber(id)
	require.Eventually(t, func() bool {
		st := call("GET", path, nil)["state"]
		return st == "failed" || st == "completed"
	}, 20*time.Second, 20*time.Millisecond)
	got := call("GET", path, nil)
	call("GET", path+"/audit", nil)
	call("GET", "/v1/tasks", nil)
	call("GET", "/v1/workflows", nil)
	call("GET", "/v1/workflows/sec/calls/versions/1", nil)
	for _, s := range got["steps"].([]any) {
		step := s.(map[string]any)
		call("GET", "/v1/steps/"+jsonNumber(int64(step["id"].(float64))), nil)
	}
	stop()
	require.Equal(t, 0, <-done, stderr.String())

	// The secrets were used.
	mu.Lock()
	require.Equal(t, []string{"Bearer " + secret}, seen)
	mu.Unlock()
	out, err := os.ReadFile(execOut)
	require.NoError(t, err)
	require.Equal(t, secret+"|"+secret+"-file", string(out))
	// Results and errors that quoted them say [secret:NAME].
	require.Contains(t, responses.String(), `Bearer [secret:API_TOKEN]`)
	require.Contains(t, responses.String(), `token is [secret:API_TOKEN]`)
	require.Contains(t, responses.String(), `key=[secret:API_TOKEN]`)

	// And never left.
	require.NotContains(t, responses.String(), secret, "API responses")
	require.NotContains(t, stderr.String(), secret, "logs")
	require.NotContains(t, stdout.String(), secret)
	files, err := filepath.Glob(db + "*")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		require.False(t, bytes.Contains(b, []byte(secret)), "the database file %s holds the secret", f)
	}
}

func jsonNumber(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}
