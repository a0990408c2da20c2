// Package apicontract holds a weft server to its OpenAPI document in
// tests: Serve wraps the server's handler and fails the test when an
// answer leaves the document; the proxy command (apicontract/proxy) does
// the same in front of a running weft serve, for the Python and
// TypeScript clients' tests.
package apicontract

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/server"
)

var openAPIRouter = sync.OnceValues(func() (routers.Router, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(server.OpenAPI())
	if err != nil {
		return nil, fmt.Errorf("load openapi.json: %w", err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		return nil, fmt.Errorf("openapi.json is not a valid document: %w", err)
	}
	// The document's server is a placeholder; routes match on the path.
	doc.Servers = nil
	return gorillamux.NewRouter(doc)
})

// Serve returns h checked against the API's document: the test fails, at
// its end, where the server answered a status the route does not declare,
// with a body its schema refuses, or on a route the document lacks; or
// where it accepted (2xx) a request the document refuses. Requests the
// document refuses and the server refuses too are what tests of bad input
// send: only their answer is checked. Event streams are checked for their
// status only.
func Serve(t testing.TB, h http.Handler) http.Handler {
	t.Helper()
	var mu sync.Mutex
	var broken []string
	c, err := New(h, func(breach string) {
		mu.Lock()
		defer mu.Unlock()
		if len(broken) < 20 {
			broken = append(broken, breach)
		}
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		require.Empty(t, broken, "answers outside the API's document (server/openapi.json)")
	})
	return c
}

// New returns h checked against the API's document, as Serve does, telling
// report of each breach as it happens.
func New(h http.Handler, report func(breach string)) (http.Handler, error) {
	router, err := openAPIRouter()
	if err != nil {
		return nil, err
	}
	return &contract{h: h, router: router, report: report}, nil
}

// contract serves h and reports where an answer leaves the document.
type contract struct {
	h      http.Handler
	router routers.Router
	report func(string)
}

func (c *contract) breach(format string, args ...any) { c.report(fmt.Sprintf(format, args...)) }

func (c *contract) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// What the server reads of the body, it reads through a copy: a body
	// it refuses early stays unread, as without the check.
	var body bytes.Buffer
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.TeeReader(r.Body, &body), r.Body}
	rec := &recorder{ResponseWriter: w}
	c.h.ServeHTTP(rec, r)
	c.check(r, body.Bytes(), rec)
}

// check holds one exchange against the document.
func (c *contract) check(r *http.Request, body []byte, rec *recorder) {
	if rec.skip {
		return
	}
	what := r.Method + " " + r.URL.Path
	if !strings.HasPrefix(r.URL.Path, "/v1/") && !strings.HasPrefix(r.URL.Path, "/health") && r.URL.Path != "/metrics" {
		return // the dashboard's pages, not the API
	}
	status := rec.status
	if status == 0 {
		if r.Context().Err() != nil {
			return // the client went away: no answer reached it
		}
		status = http.StatusOK
	}
	req := r.Clone(context.Background())
	req.Body = io.NopCloser(bytes.NewReader(body))
	route, params, err := c.router.FindRoute(req)
	if err != nil {
		if status != http.StatusNotFound && status != http.StatusMethodNotAllowed {
			c.breach("%s: answered %d on a route the document lacks (%v)", what, status, err)
		}
		return
	}
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, MultiError: true}}
	if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil && status < 300 {
		c.breach("%s: answered %d to a request the document refuses: %v", what, status, err)
	}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: status, Header: rec.Header(),
		Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true}}
	if strings.HasPrefix(rec.Header().Get("Content-Type"), "text/event-stream") {
		// A stream's events are checked by the event tests; here, that
		// its status is declared.
		out.Options.ExcludeResponseBody = true
	}
	out.SetBodyBytes(rec.body.Bytes())
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		c.breach("%s: %d %s: %v", what, status, truncate(rec.body.String(), 300), err)
	}
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// recorder passes an answer through and keeps its status and the start of
// its body.
type recorder struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
	skip   bool
}

// Skip leaves this exchange unchecked: its answer is not the server's (a
// proxy's 502 while the server restarts).
func (r *recorder) Skip() { r.skip = true }

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	if r.body.Len() < 4<<20 {
		r.body.Write(p)
	}
	return r.ResponseWriter.Write(p)
}

func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (r *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return http.NewResponseController(r.ResponseWriter).Hijack()
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
