package server_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"net/url"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/server"
)

// apiOp is one operation of openapi.json with the parameters it lists.
type apiOp struct {
	method, path  string
	query, inPath []string
}

// openAPIOps reads the operations of openapi.json.
func openAPIOps(t *testing.T) []apiOp {
	t.Helper()
	data, err := os.ReadFile("openapi.json")
	require.NoError(t, err)
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	require.NoError(t, json.Unmarshal(data, &doc))
	type param struct{ Name, In string }
	var ops []apiOp
	for path, item := range doc.Paths {
		var common []param
		if raw, ok := item["parameters"]; ok {
			require.NoError(t, json.Unmarshal(raw, &common))
		}
		for method, raw := range item {
			if method == "parameters" {
				continue
			}
			var op struct{ Parameters []param }
			require.NoError(t, json.Unmarshal(raw, &op))
			o := apiOp{method: strings.ToUpper(method), path: path}
			for _, p := range append(append([]param{}, common...), op.Parameters...) {
				switch p.In {
				case "query":
					o.query = append(o.query, p.Name)
				case "path":
					o.inPath = append(o.inPath, p.Name)
				}
			}
			ops = append(ops, o)
		}
	}
	sort.Slice(ops, func(i, j int) bool { return ops[i].method+ops[i].path < ops[j].method+ops[j].path })
	require.NotEmpty(t, ops)
	return ops
}

// fill replaces each {name} of an OpenAPI path with an ordinary value, or
// with the value in set (as it is, already escaped or raw).
func fill(path string, set map[string]string) string {
	for {
		i := strings.IndexByte(path, '{')
		if i < 0 {
			return path
		}
		j := i + strings.IndexByte(path[i:], '}')
		name := path[i+1 : j]
		v, ok := set[name]
		if !ok {
			v = "x1"
			if name == "id" {
				v = "1"
			}
		}
		path = path[:i] + v + path[j+1:]
	}
}

// TestQueryParametersEveryRoute: every route takes exactly the query
// parameters openapi.json lists for it, and refuses any other with 400
// unknown_field naming it.
func TestQueryParametersEveryRoute(t *testing.T) {
	t.Parallel()
	en := newEnv(t, backends()["sqlite"](t), server.Options{})
	served := map[string][]string{}
	for _, rt := range en.srv.Routes() {
		q := append([]string{}, rt.Query...)
		sort.Strings(q)
		served[rt.Method+" "+rt.Path] = q
	}
	for _, op := range openAPIOps(t) {
		name := op.method + " " + op.path
		documented := append([]string{}, op.query...)
		sort.Strings(documented)
		got, ok := served[name]
		require.True(t, ok, "%s is documented but not served", name)
		require.Equal(t, documented, got, "query parameters of %s: openapi.json and the route", name)

		path := fill(op.path, nil)
		r := en.do(op.method, path+"?colour=red", en.admin, "{}")
		require.Equal(t, 400, r.status, "%s ?colour=red: %s", name, r.body)
		code, field := r.errorCode(t)
		require.Equal(t, server.CodeUnknownField, code, "%s", name)
		require.Equal(t, "colour", field, "%s", name)

		for _, p := range op.query {
			r := en.do(op.method, path+"?"+p+"=1", en.admin, "{}")
			if r.status == 400 {
				code, field := r.errorCode(t)
				require.False(t, code == server.CodeUnknownField && field == p, "%s refuses its documented parameter %s: %s", name, p, r.body)
			}
		}
	}
}

// TestUnstorableURLTextEveryRoute: a NUL character or bytes that are not
// UTF-8, raw or percent-encoded, in any query parameter or path segment of
// any route, are 400 invalid_field naming the parameter (or 404), on every
// store: never a 500 from a store that cannot compare such text.
func TestUnstorableURLTextEveryRoute(t *testing.T) {
	t.Parallel()
	ops := openAPIOps(t)
	type bad struct {
		name, v string
		escaped bool // v is already percent-encoded; else sent raw
	}
	bads := []bad{
		{"raw NUL", "a\x00b", false}, {"raw invalid UTF-8", "a\xffb", false}, {"raw both", "\x00\xff", false},
		{"encoded NUL", "a%00b", true}, {"encoded invalid UTF-8", "a%FFb", true}, {"encoded both", "%00%FF", true},
	}
	eachBackend(t, func(t *testing.T, open storeFactory) {
		en := newEnv(t, open(t), server.Options{RequestTimeout: 5 * time.Second})
		// send sends a request with the path and query as given: raw bytes
		// through the handler itself (an HTTP client would escape them),
		// escaped ones over the network.
		send := func(method, path, query string, raw bool) response {
			if !raw {
				u := path
				if query != "" {
					u += "?" + query
				}
				return en.do(method, u, en.admin, "{}")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			req := httptest.NewRequest(method, "/", strings.NewReader("{}")).WithContext(ctx)
			req.URL = &url.URL{Path: path, RawQuery: query}
			req.RequestURI = ""
			req.Header.Set("Authorization", "Bearer "+en.admin)
			req.Header.Set("Content-Type", "application/json")
			rec := httptest.NewRecorder()
			en.srv.ServeHTTP(rec, req)
			return response{status: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}
		}
		for _, op := range ops {
			for _, b := range bads {
				check := func(param string, r response) {
					t.Helper()
					what := op.method + " " + op.path + " " + param + " " + b.name
					require.Contains(t, []int{400, 404}, r.status, "%s: %s", what, r.body)
					if r.status == 400 {
						code, field := r.errorCode(t)
						require.Equal(t, server.CodeInvalidField, code, "%s: %s", what, r.body)
						require.Equal(t, param, field, "%s: %s", what, r.body)
					}
				}
				for _, p := range op.inPath {
					path := fill(op.path, map[string]string{p: b.v})
					check(p, send(op.method, path, "", !b.escaped))
				}
				// The route's own parameters; a route without any gets
				// one it does not take, which must not fail either.
				params := op.query
				if len(params) == 0 {
					params = []string{"namespace"}
				}
				for _, p := range params {
					r := send(op.method, fill(op.path, nil), p+"="+b.v, !b.escaped)
					if len(op.query) == 0 {
						require.Equal(t, 400, r.status, "%s %s: %s", op.method, op.path, r.body)
						continue
					}
					check(p, r)
				}
			}
		}
	})
}
