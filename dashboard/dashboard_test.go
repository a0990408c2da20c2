package dashboard_test

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/server"
	"github.com/weftrun/weft/state"
)

var csrfMeta = regexp.MustCompile(`<meta name="csrf-token" content="([0-9a-f]*)">`)

// csrf reads the session's CSRF token from a page, as the page's script does.
func csrf(t testing.TB, c *http.Client, url string) string {
	t.Helper()
	_, body := get(t, c, url+"/tasks")
	m := csrfMeta.FindStringSubmatch(body)
	require.NotNil(t, m, "the page carries the CSRF token")
	return m[1]
}

// post sends an API request with the session cookie and the given headers.
func post(t testing.TB, c *http.Client, url string, headers map[string]string) int {
	t.Helper()
	return postBody(t, c, url, "application/json", `{}`, headers)
}

// postBody sends a POST of body, of contentType, with the client's cookies
// and the given headers, and returns its status.
func postBody(t testing.TB, c *http.Client, url, contentType, body string, headers map[string]string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", contentType)
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	res, err := c.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	return res.StatusCode
}

func TestSignIn(t *testing.T) {
	t.Parallel()
	en := newEnv(t, stores["sqlite"](t), server.Options{})
	c := client()

	res, err := c.Get(en.url + "/tasks?state=failed")
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusSeeOther, res.StatusCode, "no session: to the sign-in page")
	require.Equal(t, "/signin?next=%2Ftasks%3Fstate%3Dfailed", res.Header.Get("Location"))

	for _, bad := range []string{"", "not-a-key", "weft_0123456789abcdef_wrongsecretwrongsecretwrongsecretwrongsec"} {
		res := en.signIn(c, bad)
		require.Equal(t, http.StatusUnauthorized, res.StatusCode, "key %q", bad)
		require.Empty(t, res.Cookies())
	}

	res = en.signIn(c, en.admin)
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.Equal(t, "/tasks", res.Header.Get("Location"))
	var cookie *http.Cookie
	for _, ck := range res.Cookies() {
		if ck.Name == server.SessionCookie {
			cookie = ck
		}
	}
	require.NotNil(t, cookie)
	require.True(t, cookie.HttpOnly)
	require.Equal(t, http.SameSiteStrictMode, cookie.SameSite)
	require.False(t, cookie.Secure, "plain HTTP: not Secure (it is over TLS)")

	status, body := get(t, c, en.url+"/")
	require.Equal(t, http.StatusOK, status)
	contains(t, body, "key <b>admin</b>", "Sign out")

	// An open redirect is refused: next stays on this site.
	res, err = c.PostForm(en.url+"/signin", map[string][]string{"key": {en.admin}, "next": {"//evil.example/"}})
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, "/", res.Header.Get("Location"))

	// Sign-in and sign-out from another site are refused, by its Origin
	// or by Sec-Fetch-Site alone, as every state-changing request is.
	for _, path := range []string{"/signin", "/signout"} {
		for _, hdr := range []map[string]string{{"Origin": "https://evil.example"}, {"Sec-Fetch-Site": "cross-site"}} {
			status := postBody(t, c, en.url+path, "application/x-www-form-urlencoded", "key="+en.admin, hdr)
			require.Equal(t, http.StatusForbidden, status, "%s %v", path, hdr)
		}
	}

	res, err = c.PostForm(en.url+"/signout", nil)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	res, err = c.Get(en.url + "/")
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusSeeOther, res.StatusCode, "signed out")
}

func TestSessionActionsNeedCSRFAndSameOrigin(t *testing.T) {
	t.Parallel()
	en := newEnv(t, stores["sqlite"](t), server.Options{})
	c := client()
	en.signIn(c, en.admin)
	token := csrf(t, c, en.url)
	cancel := fmt.Sprintf("%s/v1/tasks/%d/cancel", en.url, en.running)

	status, _ := get(t, c, en.url+"/v1/tasks?state=failed")
	require.Equal(t, http.StatusOK, status, "reads need no CSRF token")
	for name, h := range map[string]map[string]string{
		"no token":      {},
		"wrong token":   {server.CSRFHeader: strings.Repeat("0", 64)},
		"other origin":  {server.CSRFHeader: token, "Origin": "https://evil.example"},
		"cross-site":    {server.CSRFHeader: token, "Sec-Fetch-Site": "cross-site"},
		"token of none": {server.CSRFHeader: ""},
	} {
		require.Equal(t, http.StatusForbidden, post(t, c, cancel, h), name)
	}
	require.Equal(t, state.TaskRunning, en.waitTask(en.running, func(*weft.Task) bool { return true }).State, "nothing was cancelled")

	require.Equal(t, http.StatusOK, post(t, c, cancel, map[string]string{server.CSRFHeader: token, "Origin": en.url, "Sec-Fetch-Site": "same-origin"}))
	en.waitTask(en.running, func(t *weft.Task) bool { return t.State == state.TaskCancelled })
	audit, err := en.e.Audit(context.Background(), en.running)
	require.NoError(t, err)
	last := audit[len(audit)-1]
	for _, a := range audit {
		if a.Step == "" && a.To == string(state.TaskCancelled) {
			last = a
		}
	}
	require.Equal(t, "api:admin", last.EngineID, "the audit trail names the session's key")

	// A bearer credential still works beside the cookie, without CSRF.
	req, err := http.NewRequest(http.MethodGet, en.url+"/v1/tasks", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+en.reader)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
}

func TestReadOnlyKeySeesNoActions(t *testing.T) {
	t.Parallel()
	en := newEnv(t, stores["sqlite"](t), server.Options{})
	admin, reader := client(), client()
	en.signIn(admin, en.admin)
	en.signIn(reader, en.reader)
	actions := []string{`data-api=`, `data-bulk=`, `api-form`}
	for _, page := range []string{fmt.Sprintf("/tasks/%d", en.failed), fmt.Sprintf("/tasks/%d", en.awaiting), "/tasks"} {
		_, body := get(t, admin, en.url+page)
		require.True(t, containsAny(body, actions), "admin sees actions on %s", page)
		status, body := get(t, reader, en.url+page)
		require.Equal(t, http.StatusOK, status)
		require.False(t, containsAny(body, actions), "a read-only key sees no action on %s", page)
		contains(t, body, "read-only")
	}
	// And the API refuses it anyway.
	token := csrf(t, reader, en.url)
	require.Equal(t, http.StatusForbidden, post(t, reader, fmt.Sprintf("%s/v1/tasks/%d/retry", en.url, en.failed), map[string]string{server.CSRFHeader: token}))
	// A key without workflows:read has no Workflows page.
	nowf := client()
	en.signIn(nowf, en.key("tasks-only", server.PermTasksRead))
	_, body := get(t, nowf, en.url+"/")
	require.NotContains(t, body, `href="/workflows"`)
	status, _ := get(t, nowf, en.url+"/workflows")
	require.Equal(t, http.StatusForbidden, status)
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

func TestPages(t *testing.T) {
	t.Parallel()
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			en := newEnv(t, open(t), server.Options{DisableAuth: true})
			c := client()
			id := func(n int64) string { return strconv.FormatInt(n, 10) }
			tests := []struct {
				path   string
				status int
				want   []string
				absent []string
			}{
				{"/", 200, []string{"Overview", `href="/tasks?state=failed"`, "<svg class=\"chart\"", "Throughput", "Queue wait", "Failure rate", "shop"}, nil},
				{"/?window=7d", 200, []string{`class="active" aria-current="page">7d`}, nil},
				{"/?window=2y", 400, []string{"window"}, nil},
				{"/tasks", 200, []string{`href="/tasks/` + id(en.completed) + `"`, `href="/tasks/` + id(en.running) + `"`,
					`<th>duration</th><th>tags</th>`, `<a class="tag" href="/tasks?tag=order%3Dorder-A-1"`,
					// Where the unfinished tasks stand.
					`">wait</a> running, attempt 1/`, `">approved</a> waits for signal <code>approved</code>`}, nil},
				{"/tasks?tag=order%3Dorder-A-1", 200, []string{`href="/tasks/` + id(en.completed) + `"`}, []string{`href="/tasks/` + id(en.failed) + `"`}},
				{"/tasks?state=failed", 200, []string{`href="/tasks/` + id(en.failed) + `"`, checkoutFailure}, []string{`href="/tasks/` + id(en.completed) + `"`}},
				{"/tasks?namespace=ops", 200, []string{`href="/tasks/` + id(en.running) + `"`}, []string{`href="/tasks/` + id(en.failed) + `"`}},
				{"/tasks?workflow=checkout&namespace=shop", 200, []string{`href="/tasks/` + id(en.failed) + `"`}, []string{`href="/tasks/` + id(en.running) + `"`}},
				{"/tasks?q=order-A-1", 200, []string{`href="/tasks/` + id(en.completed) + `"`}, []string{`href="/tasks/` + id(en.failed) + `"`}},
				{"/tasks?q=" + id(en.failed), 200, []string{`href="/tasks/` + id(en.failed) + `"`}, []string{`href="/tasks/` + id(en.completed) + `"`}},
				{"/tasks?q=" + id(en.running), 200, []string{`href="/tasks/` + id(en.running) + `"`, `">wait</a> running, attempt 1/`}, nil},
				{"/tasks?from=2000-01-01T00:00&to=2000-01-02T00:00", 200, []string{"No task matches"}, nil},
				{"/tasks?cursor=" + id(en.failed), 200, []string{`href="/tasks/` + id(en.completed) + `"`, "Newest"}, []string{`href="/tasks/` + id(en.failed) + `"`}},
				{"/tasks?state=bogus", 400, []string{"not a task state"}, nil},
				{"/tasks?from=yesterday", 400, []string{"from"}, nil},
				{"/tasks/" + id(en.failed), 200, []string{`<svg class="dag"`, `data-step="charge"`, `class="node st-failed"`, `class="node st-skipped"`,
					`<svg class="gantt"`, checkoutFailure, "Audit trail", `id="retry"`, "Retry step", "Resolve by hand", "order-A-2",
					"<dt>duration</dt>", `<dt>tags</dt><dd><a class="tag" href="/tasks?tag=order%3Dorder-A-2"`}, []string{`id="cancel"`}},
				{"/tasks/" + id(en.running), 200, []string{`id="cancel"`, `class="node st-running"`}, []string{`id="retry"`}},
				{"/tasks/" + id(en.awaiting), 200, []string{`id="signal-form"`, "Waiting for: approved"}, nil},
				{"/tasks/" + id(en.completed) + "?fragment=1", 200, []string{`<svg class="dag"`}, []string{"<html"}},
				{"/tasks/999999", 404, nil, nil},
				{"/tasks/abc", 400, nil, nil},
				{"/workflows", 200, []string{`href="/workflows/shop/checkout"`, `href="/workflows/ops/approval"`}, nil},
				{"/workflows/shop/checkout", 200, []string{`<svg class="dag"`, `data-step="ship"`, "shop.charge"}, nil},
				{"/workflows/shop/nope", 404, nil, nil},
				{"/workers", 200, []string{en.e.ID()}, nil},
				{"/nope", 404, []string{"There is no page"}, nil},
			}
			for _, tt := range tests {
				status, body := get(t, c, en.url+tt.path)
				require.Equal(t, tt.status, status, "%s: %s", tt.path, body)
				contains(t, body, tt.want...)
				for _, a := range tt.absent {
					require.NotContains(t, body, a, tt.path)
				}
			}
			// Unknown API paths stay JSON.
			res, err := c.Get(en.url + "/v1/nope")
			require.NoError(t, err)
			res.Body.Close()
			require.Equal(t, http.StatusNotFound, res.StatusCode)
			require.Equal(t, "application/json", res.Header.Get("Content-Type"))
		})
	}
}

func TestAuthDisabledRefusesCrossSiteWrites(t *testing.T) {
	t.Parallel()
	en := newEnv(t, stores["sqlite"](t), server.Options{DisableAuth: true})
	c := client()
	cancel := fmt.Sprintf("%s/v1/tasks/%d/cancel", en.url, en.running)
	require.Equal(t, http.StatusForbidden, post(t, c, cancel, map[string]string{"Origin": "https://evil.example"}))
	require.Equal(t, http.StatusForbidden, post(t, c, cancel, map[string]string{"Sec-Fetch-Site": "cross-site"}))
	require.Equal(t, http.StatusOK, post(t, c, cancel, map[string]string{"Origin": en.url}))
}
