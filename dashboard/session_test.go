package dashboard_test

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/dashboard"
	"github.com/weftrun/weft/server"
)

// sessionCookie returns the session cookie a response sets.
func sessionCookie(t testing.TB, res *http.Response) *http.Cookie {
	t.Helper()
	for _, ck := range res.Cookies() {
		if ck.Name == server.SessionCookie {
			return ck
		}
	}
	t.Fatal("no session cookie set")
	return nil
}

// withCookie fetches a page with a copy of a session cookie, as a stolen
// or surviving copy would be sent.
func withCookie(t testing.TB, rawURL string, ck *http.Cookie) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, rawURL, nil)
	require.NoError(t, err)
	req.AddCookie(&http.Cookie{Name: ck.Name, Value: ck.Value})
	res, err := client().Do(req)
	require.NoError(t, err)
	res.Body.Close()
	return res.StatusCode
}

// TestSessionIsServerSide: the cookie holds a session's secret, not the API
// key, and signing out or revoking the key ends the session on the server,
// so a copy of the cookie that outlives the browser's signs nobody in.
func TestSessionIsServerSide(t *testing.T) {
	t.Parallel()
	en := newEnv(t, stores["sqlite"](t), server.Options{CredentialRecheck: 50 * time.Millisecond})
	for _, end := range []string{"sign-out", "revocation"} {
		t.Run(end, func(t *testing.T) {
			key := en.key("ops-"+end, server.PermTasksRead)
			c := client()
			ck := sessionCookie(t, en.signIn(c, key))
			require.NotContains(t, ck.Value, key, "the cookie is not the key")
			_, secret, _ := strings.Cut(strings.TrimPrefix(key, "weft_"), "_")
			require.NotContains(t, ck.Value, secret)
			require.Equal(t, http.StatusOK, withCookie(t, en.url+"/tasks", ck), "the copy works while the session lasts")
			// A page's live stream, open when the session ends. The
			// deadline only stops a stream that never ends.
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, en.url+"/v1/events", nil)
			require.NoError(t, err)
			req.AddCookie(&http.Cookie{Name: ck.Name, Value: ck.Value})
			stream, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer stream.Body.Close()
			require.Equal(t, http.StatusOK, stream.StatusCode)

			switch end {
			case "sign-out":
				res, err := c.PostForm(en.url+"/signout", nil)
				require.NoError(t, err)
				res.Body.Close()
			case "revocation":
				keys, err := en.st.ListAPIKeys(context.Background())
				require.NoError(t, err)
				for _, k := range keys {
					if k.Name == "ops-"+end {
						require.NoError(t, en.st.RevokeAPIKey(context.Background(), k.ID))
					}
				}
			}
			require.Equal(t, http.StatusSeeOther, withCookie(t, en.url+"/tasks", ck), "the session has ended on the server")
			rest, err := io.ReadAll(stream.Body)
			require.NoError(t, err, "the open stream ends on its own")
			require.Contains(t, string(rest), "event: error")
			require.Contains(t, string(rest), `"code":"unauthenticated"`)
			req, err = http.NewRequest(http.MethodGet, en.url+"/v1/tasks", nil)
			require.NoError(t, err)
			req.AddCookie(&http.Cookie{Name: ck.Name, Value: ck.Value})
			res, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			res.Body.Close()
			require.Equal(t, http.StatusUnauthorized, res.StatusCode, "and the API refuses it too")
		})
	}

	t.Run("a key in the cookie", func(t *testing.T) {
		// Before sessions were recorded the cookie held the key itself:
		// such a cookie signs nobody in now.
		require.Equal(t, http.StatusSeeOther, withCookie(t, en.url+"/tasks", &http.Cookie{Name: server.SessionCookie, Value: en.admin}))
	})
}

// TestSessionCookieSecure: the cookie is Secure when the browser's request
// arrived over TLS, natively or through a trusted proxy, and only then.
func TestSessionCookieSecure(t *testing.T) {
	t.Parallel()
	loopback := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	elsewhere := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	for _, tc := range []struct {
		name    string
		tls     bool
		proxies []netip.Prefix
		proto   string
		secure  bool
	}{
		{name: "plain HTTP", secure: false},
		{name: "native TLS", tls: true, secure: true},
		{name: "trusted proxy over https", proxies: loopback, proto: "https", secure: true},
		{name: "trusted proxy over http", proxies: loopback, proto: "http", secure: false},
		{name: "header from an untrusted address", proxies: elsewhere, proto: "https", secure: false},
		{name: "header without trusted proxies", proto: "https", secure: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			en := newEnv(t, stores["sqlite"](t), server.Options{TrustedProxies: tc.proxies})
			base := en.url
			c := client()
			if tc.tls {
				hs := httptest.NewTLSServer(en.handler)
				t.Cleanup(hs.Close)
				base = hs.URL
				c.Transport = &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // the test's own server
			}
			form := url.Values{"key": {en.admin}, "next": {"/tasks"}}
			req, err := http.NewRequest(http.MethodPost, base+"/signin", strings.NewReader(form.Encode()))
			require.NoError(t, err)
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			if tc.proto != "" {
				req.Header.Set("X-Forwarded-Proto", tc.proto)
			}
			res, err := c.Do(req)
			require.NoError(t, err)
			res.Body.Close()
			require.Equal(t, http.StatusSeeOther, res.StatusCode)
			require.Equal(t, tc.secure, sessionCookie(t, res).Secure)
		})
	}
}

// browserTarget resolves a Location header as a browser does (WHATWG URL
// parsing: tabs and newlines removed anywhere, leading and trailing C0
// controls and spaces trimmed, a backslash read as a slash) against the
// page's URL.
func browserTarget(t testing.TB, base *url.URL, location string) *url.URL {
	t.Helper()
	loc := strings.TrimFunc(location, func(r rune) bool { return r <= ' ' })
	loc = strings.NewReplacer("\t", "", "\n", "", "\r", "", `\`, "/").Replace(loc)
	u, err := url.Parse(loc)
	if err != nil {
		return &url.URL{Host: "unparseable.invalid"}
	}
	return base.ResolveReference(u)
}

// TestSignInRedirectStaysOnSite: whatever next a link carries, the
// browser lands on this site after signing in: the sign-in answer and the
// form it renders both keep it.
func TestSignInRedirectStaysOnSite(t *testing.T) {
	t.Parallel()
	en := newEnv(t, stores["sqlite"](t), server.Options{})
	base, err := url.Parse(en.url + "/signin")
	require.NoError(t, err)
	for _, next := range []string{
		"//evil.example/x",
		"/\t/evil.example/x",
		"/%09/evil.example/x",
		"/\n/evil.example/x",
		"/\r\n/evil.example/x",
		"\t//evil.example/x",
		" //evil.example/x",
		`/\evil.example/x`,
		`\/evil.example/x`,
		`/\/evil.example/x`,
		"/\t\\evil.example/x",
		"https://evil.example/x",
		"https:evil.example/x",
		"javascript:alert(1)",
		"/\x00/evil.example",
		"/\x0b/evil.example",
		"///evil.example/x",
		"evil.example/x",
	} {
		raw, err := url.QueryUnescape(next)
		if err != nil {
			raw = next
		}
		for _, n := range []string{next, raw} {
			res, err := client().PostForm(en.url+"/signin", url.Values{"key": {en.admin}, "next": {n}})
			require.NoError(t, err)
			res.Body.Close()
			require.Equal(t, http.StatusSeeOther, res.StatusCode)
			to := browserTarget(t, base, res.Header.Get("Location"))
			require.Equal(t, base.Host, to.Host, "next %q: Location %q leaves the site", n, res.Header.Get("Location"))
			require.Contains(t, []string{"http", "https"}, to.Scheme, "next %q", n)
		}
	}
	// A path of this site survives, query and all.
	res, err := client().PostForm(en.url+"/signin", url.Values{"key": {en.admin}, "next": {"/tasks?state=failed&tag=a%3Db"}})
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, "/tasks?state=failed&tag=a%3Db", res.Header.Get("Location"))
}

// TestPagesNeedTheirRoutesPermission: every page shows what an API route
// serves and needs that route's permission, so a key sees on the dashboard
// no more than the API would give it.
func TestPagesNeedTheirRoutesPermission(t *testing.T) {
	t.Parallel()
	en := newEnv(t, stores["sqlite"](t), server.Options{})
	srv, err := server.New(en.e, server.Options{Logger: quietLogger(), UI: dashboard.New})
	require.NoError(t, err)
	perms := map[string]string{}
	for _, rt := range srv.Routes() {
		perms[rt.Method+" "+rt.Path] = rt.Permission
	}
	pages := dashboard.Pages(srv)
	require.NotEmpty(t, pages)
	for _, p := range pages {
		perm, ok := perms[p.Route]
		require.True(t, ok, "page %s: %q is not a route of the API", p.Pattern, p.Route)
		require.NotEmpty(t, perm, "page %s shows a public route's data", p.Pattern)
		// A page named like an API resource (/workers, /schedules) shows
		// that resource's route.
		seg, _, _ := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(p.Pattern, "GET "), "/"), "/")
		for rt := range perms {
			if seg != "" && strings.HasPrefix(rt, "GET /v1/"+seg) {
				require.True(t, strings.HasPrefix(p.Route, "GET /v1/"+seg), "page %s shows %s, not its own resource's route", p.Pattern, p.Route)
			}
		}

		// A key with every permission but that one is refused the page.
		var others []string
		for _, q := range server.Permissions {
			if q != perm && q != server.PermAdmin {
				others = append(others, q)
			}
		}
		c := client()
		en.signIn(c, en.key("without-"+perm, others...))
		path := strings.TrimPrefix(p.Pattern, "GET ")
		path = strings.TrimSuffix(path, "{$}")
		path = strings.NewReplacer("{id}", "1", "{namespace}", "shop", "{name}", "checkout").Replace(path)
		status, _ := get(t, c, en.url+path)
		require.Equal(t, http.StatusForbidden, status, "page %s without %s", p.Pattern, perm)

		c = client()
		en.signIn(c, en.key("only-"+perm, perm))
		status, _ = get(t, c, en.url+path)
		require.Equal(t, http.StatusOK, status, "page %s with %s alone", p.Pattern, perm)
	}
}
