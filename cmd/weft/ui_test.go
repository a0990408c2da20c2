package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/state"
)

func TestLoopbackHost(t *testing.T) {
	t.Parallel()
	for host, want := range map[string]bool{
		"127.0.0.1": true, "127.1.2.3": true, "::1": true, "[::1]": true, "localhost": true, "LOCALHOST": true,
		"0.0.0.0": false, "": false, "10.0.0.1": false, "example.com": false, "localhost.evil.example": false, "::": false,
	} {
		require.Equal(t, want, loopbackHost(host), host)
	}
}

func TestUIRefusesNonLoopbackAddress(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "weft.db")
	for _, addr := range []string{"0.0.0.0:8080", ":8080", "192.0.2.1:8080", "example.com:8080"} {
		r := weftCLI(t, "--db", db, "ui", "--addr", addr)
		requireCode(t, 2, r)
		require.Contains(t, r.stderr, "is not a loopback address", addr)
		require.Contains(t, r.stderr, "--require-keys")
	}
	requireCode(t, 2, weftCLI(t, "--db", db, "ui", "--addr", "nowhere"))
}

// TestUIServesTheDashboard runs `weft ui` and checks that it answers the
// dashboard without sign-in, for loopback names only, and refuses
// cross-site writes.
func TestUIServesTheDashboard(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "weft.db")
	// The dashboard of a database that is not there is refused, not
	// served empty; a key created on one says it created it.
	r := weftCLI(t, "--db", db, "ui")
	requireCode(t, 1, r)
	require.Contains(t, r.stderr, "no database at")
	r = weftCLI(t, "--db", db, "keys", "create", "--name", "x", "--permissions", "tasks:read")
	requireCode(t, 0, r)
	require.Contains(t, r.stderr, "created a new, empty database at "+db)
	p := startServing(t, db, "ui")
	res, err := http.Get(p.url + "/")
	require.NoError(t, err)
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, string(body), "<h1>Overview</h1>")
	require.Contains(t, string(body), `class="badge local"`, "no sign-in")

	req, err := http.NewRequest(http.MethodGet, p.url+"/", nil)
	require.NoError(t, err)
	req.Host = "rebound.example:8080"
	res, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusMisdirectedRequest, res.StatusCode, "a name that is not loopback is refused")

	req, err = http.NewRequest(http.MethodPost, p.url+"/v1/tasks/1/cancel", strings.NewReader(`{}`))
	require.NoError(t, err)
	req.Header.Set("Origin", "https://evil.example")
	res, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusForbidden, res.StatusCode, "a cross-site write is refused")
}

// TestServeServesTheDashboard checks that `weft serve` answers / with the
// sign-in page and keeps unknown API paths JSON.
func TestServeServesTheDashboard(t *testing.T) {
	t.Parallel()
	url, _ := startServe(t, filepath.Join(t.TempDir(), "weft.db"))
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := client.Get(url + "/")
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.Equal(t, "/signin?next=%2F", res.Header.Get("Location"))
	res, err = client.Get(url + "/v1/nope")
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, "application/json", res.Header.Get("Content-Type"))
}

// TestUIRunsNoSteps: 'weft ui' runs no handlers, whatever the database: it
// does not register as an engine, a ready exec step stays ready, and a task
// submitted through its API is not claimed by it. It takes no engine flags
// (no --concurrency to refuse).
func TestUIRunsNoSteps(t *testing.T) {
	t.Parallel()
	for name, db := range map[string]func(t *testing.T) string{
		"sqlite":   func(t *testing.T) string { return filepath.Join(t.TempDir(), "weft.db") },
		"postgres": func(t *testing.T) string { _, url, _ := freshSchema(t); return url },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db := db(t)
			dir := t.TempDir()
			marker := filepath.Join(dir, "ran")
			tpl := writeFile(t, dir, "touch.yaml", fmt.Sprintf("namespace: ops\nname: touch\nversion: \"1\"\nsteps:\n  - name: touch\n    handler: exec\n    config: {command: [\"touch\", %q]}\n", marker))
			r := weftCLI(t, "--db", db, "submit", tpl)
			requireCode(t, 0, r)
			before := strings.TrimSpace(r.stdout)

			p := startServing(t, db, "ui")
			r = weftCLI(t, "--db", db, "workers", "--json")
			requireCode(t, 0, r)
			require.NotContains(t, r.stdout, `"kind"`, "weft ui registered no engine: %s", r.stdout)

			res, err := http.Post(p.url+"/v1/tasks", "application/json", strings.NewReader(`{"workflow": "ops/touch"}`))
			require.NoError(t, err)
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			require.Equal(t, http.StatusCreated, res.StatusCode, "%s", body)
			var created struct{ ID int64 }
			require.NoError(t, json.Unmarshal(body, &created), "%s", body)

			for _, id := range []string{before, strconv.FormatInt(created.ID, 10)} {
				r = weftCLI(t, "--db", db, "task", id, "--json")
				requireCode(t, 0, r)
				task := decodeTask(t, r.stdout)
				require.Equal(t, state.TaskPending, task.State, "task %s", id)
				require.Equal(t, state.StepReady, task.Steps[0].State, "task %s: its step waits for an engine", id)
			}
			require.NoFileExists(t, marker)
			requireCode(t, 2, weftCLI(t, "--db", db, "ui", "--concurrency", "0"))
		})
	}
}
