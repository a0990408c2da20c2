package main

import (
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
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
	p := startServing(t, filepath.Join(t.TempDir(), "weft.db"), "ui")
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
