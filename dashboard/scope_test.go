package dashboard_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/server"
)

// TestPagesShowTheKeysNamespaces signs in with a key whose every
// permission holds in namespace ops alone, and checks every page: nothing
// of namespace shop shows (its tasks, workflows, counts, charts and
// schedules), shop's task and workflow pages are not found, and ops's are
// there.
func TestPagesShowTheKeysNamespaces(t *testing.T) {
	t.Parallel()
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			en := newEnv(t, open(t), server.Options{})
			var grants []string
			for _, p := range server.Permissions {
				if p != server.PermAdmin {
					grants = append(grants, p+"@ops")
				}
			}
			c := client()
			require.Equal(t, 303, en.signIn(c, en.key("ops-team", grants...)).StatusCode)
			id := func(n int64) string { return strconv.FormatInt(n, 10) }
			// What only namespace shop holds.
			shopOnly := []string{"checkout", "order-A-", checkoutFailure, "/workflows/shop/", `href="/tasks/` + id(en.completed) + `"`,
				`href="/tasks/` + id(en.failed) + `"`}
			pages := map[string]int{
				"/": 200, "/?window=7d": 200, "/tasks": 200, "/tasks?namespace=shop": 200, "/tasks?q=order-A-1": 200,
				"/tasks?q=" + id(en.completed): 200, "/tasks?state=failed": 200, "/attention": 200,
				"/workflows": 200, "/workflows/ops/approval": 200, "/workflows/shop/checkout": 404,
				"/tasks/" + id(en.running): 200, "/tasks/" + id(en.awaiting): 200,
				"/tasks/" + id(en.completed): 404, "/tasks/" + id(en.failed): 404,
				"/workers": 200, "/schedules": 200, "/namespaces": 200,
			}
			seen := map[string]bool{}
			for path, status := range pages {
				got, body := get(t, c, en.url+path)
				require.Equal(t, status, got, "%s: %s", path, body)
				for _, s := range shopOnly {
					if !strings.Contains(path, strings.TrimPrefix(s, "/")) { // a page repeats what it was asked
						require.NotContains(t, body, s, "%s shows namespace shop", path)
					}
				}
				if p := strings.SplitN(path, "?", 2)[0]; !strings.Contains(path, "shop") && (p == "/" || p == "/tasks" || p == "/namespaces" || p == "/attention" || p == "/schedules") {
					require.NotContains(t, body, "shop", "%s names namespace shop", path)
				}
				seen[strings.SplitN(path, "?", 2)[0]] = true
			}
			_, body := get(t, c, en.url+"/tasks")
			contains(t, body, `href="/tasks/`+id(en.running)+`"`, `href="/tasks/`+id(en.awaiting)+`"`)
			contains(t, body, "key <b>ops-team</b> in ops")
			_, body = get(t, c, en.url+"/workers")
			require.NotContains(t, body, en.e.ID(), "an engine serves every namespace: a key bound to some does not see it")

			// Every page of the navigation was visited.
			for _, nav := range []string{"/", "/tasks", "/workflows", "/workers", "/attention", "/schedules", "/namespaces"} {
				require.True(t, seen[nav], "page %s not checked", nav)
			}
		})
	}
}
