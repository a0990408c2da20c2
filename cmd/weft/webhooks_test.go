package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/weftrun/weft/wire"
)

// TestWebhooksCLI: create, list, enable and delete webhooks on a database
// and through a server, and the mistakes a user can make.
func TestWebhooksCLI(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "weft.db")
	registerWorkflows(t, db, "shop")
	token := createKey(t, db, "hooks", "webhooks:*")
	url, _ := startServe(t, db)

	for name, run := range map[string]func(...string) result{
		"local": func(args ...string) result { return weftCLI(t, append([]string{"--db", db}, args...)...) },
		"server": func(args ...string) result {
			return weftCLI(t, append([]string{"--server", url, "--token", token}, args...)...)
		},
	} {
		// The URL's password is kept for deliveries, never shown.
		password := "pw-of-" + name
		r := run("webhooks", "create", "--url", "https://alice:"+password+"@hooks.example/"+name, "--namespace", "shop", "--types", "task.failed,step.failed")
		requireCode(t, 0, r)
		secret := strings.TrimSpace(r.stdout)
		require.Regexp(t, `^whsec_[0-9a-f]{64}$`, secret, name)
		require.Contains(t, r.stderr, "shown only now")
		require.NotContains(t, r.stdout+r.stderr, password, name)

		r = run("webhooks", "list", "--json")
		requireCode(t, 0, r)
		require.NotContains(t, r.stdout, secret, "%s: the secret is never listed", name)
		require.NotContains(t, r.stdout+r.stderr, password, "%s: nor the URL's password", name)
		var ws []wire.Webhook
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &ws))
		var id int64
		for _, w := range ws {
			if w.URL == "https://alice:xxxxx@hooks.example/"+name {
				id = w.ID
				require.Equal(t, []string{"task.failed", "step.failed"}, w.Types)
				require.Equal(t, "active", w.State)
			}
		}
		require.NotZero(t, id, name)
		r = run("webhooks", "list")
		requireCode(t, 0, r)
		require.Regexp(t, `(?m)^ID\s+URL\s+FILTER\s+STATE`, r.stdout)
		require.Contains(t, r.stdout, "https://alice:xxxxx@hooks.example/"+name)
		require.NotContains(t, r.stdout+r.stderr, password, name)

		sid := strings.TrimSpace(strings.Split(strings.Split(r.stdout, "\n")[1], " ")[0])
		require.NotEmpty(t, sid)
		requireCode(t, 0, run("webhooks", "enable", sid))
		r = run("webhooks", "delete", "999999")
		requireCode(t, 1, r)
		require.Contains(t, r.stderr, "webhook 999999: not found")

		for _, bad := range []struct {
			args  []string
			names string // the flag or field at fault
		}{
			{[]string{"webhooks", "create"}, "url"},
			{[]string{"webhooks", "create", "--url", "ftp://x"}, "url: "},
			{[]string{"webhooks", "create", "--url", "ftp://alice:" + password + "@x"}, `url: "ftp://alice:xxxxx@x"`},
			{[]string{"webhooks", "create", "--url", "http://x", "--types", "task.exploded"}, "types: "},
			{[]string{"webhooks", "create", "--url", "http://x", "--workflow", "a/b/c"}, "workflow: "},
			{[]string{"webhooks", "delete", "x"}, "x"},
		} {
			r := run(bad.args...)
			requireCode(t, 2, r)
			require.Contains(t, r.stderr, bad.names, "%v", bad.args)
		}
	}
	r := weftCLI(t, "--db", db, "webhooks", "list", "--json")
	requireCode(t, 0, r)
	var ws []wire.Webhook
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &ws))
	require.Len(t, ws, 2)
	for _, w := range ws {
		r = weftCLI(t, "--db", db, "webhooks", "delete", strings.TrimSpace(jsonInt(w.ID)))
		requireCode(t, 0, r)
		require.Contains(t, r.stdout, "deleted")
	}
}

func jsonInt(n int64) string { b, _ := json.Marshal(n); return string(b) }
