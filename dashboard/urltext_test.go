package dashboard_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/dashboard"
	"github.com/weftrun/weft/server"
)

// TestUnstorableURLTextEveryPage: a NUL character or bytes that are not
// UTF-8, raw or percent-encoded, in any filter or path segment of any page
// are 400 on every store: never a 500 from a store that cannot compare such
// text.
func TestUnstorableURLTextEveryPage(t *testing.T) {
	t.Parallel()
	// Every filter any page reads, sent to every page.
	params := []string{"state", "namespace", "workflow", "from", "to", "q", "tag", "schedule", "cursor", "window", "version", "fragment"}
	bads := []struct {
		name, v string
		escaped bool
	}{
		{"raw NUL", "a\x00b", false}, {"raw invalid UTF-8", "a\xffb", false}, {"raw both", "\x00\xff", false},
		{"encoded NUL", "a%00b", true}, {"encoded invalid UTF-8", "a%FFb", true}, {"encoded both", "%00%FF", true},
	}
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			en := newEnv(t, open(t), server.Options{DisableAuth: true})
			c := client()
			send := func(path, query string, raw bool) int {
				if !raw {
					u := en.url + path
					if query != "" {
						u += "?" + query
					}
					status, _ := get(t, c, u)
					return status
				}
				req := httptest.NewRequest("GET", "/", nil)
				req.URL = &url.URL{Path: path, RawQuery: query}
				rec := httptest.NewRecorder()
				en.handler.ServeHTTP(rec, req)
				return rec.Code
			}
			for _, pattern := range dashboard.PagePatterns() {
				path := strings.TrimSuffix(strings.TrimPrefix(pattern, "GET "), "{$}")
				var segs []string
				for _, seg := range strings.Split(path, "/") {
					if strings.HasPrefix(seg, "{") {
						segs = append(segs, strings.Trim(seg, "{}"))
					}
				}
				fill := func(bad, v string) string {
					p := path
					for _, s := range segs {
						x := "1"
						if s == bad {
							x = v
						}
						p = strings.Replace(p, "{"+s+"}", x, 1)
					}
					return p
				}
				for _, b := range bads {
					for _, s := range segs {
						status := send(fill(s, b.v), "", !b.escaped)
						require.Contains(t, []int{http.StatusBadRequest, http.StatusNotFound}, status, "%s segment %s %s", pattern, s, b.name)
					}
					for _, p := range params {
						status := send(fill("", ""), p+"="+b.v, !b.escaped)
						require.Equal(t, http.StatusBadRequest, status, "%s ?%s %s", pattern, p, b.name)
					}
				}
			}
		})
	}
}
