package builtin

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/internal/outcome"
)

// httpCfg marshals an http step config.
func httpCfg(t *testing.T, c map[string]any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(c)
	require.NoError(t, err)
	return b
}

// seenRequest is what a test server recorded of the request it got.
type seenRequest struct {
	method string
	uri    string
	host   string
	header http.Header
	body   string
}

// recordingServer answers every request with status, headers and body and
// hands what it saw to the returned channel.
func recordingServer(t *testing.T, status int, header map[string]string, body string) (*httptest.Server, <-chan seenRequest) {
	t.Helper()
	seen := make(chan seenRequest, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		seen <- seenRequest{method: r.Method, uri: r.RequestURI, host: r.Host, header: r.Header.Clone(), body: string(b)}
		for k, v := range header {
			w.Header().Set(k, v)
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv, seen
}

func TestHTTPSuccess(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		method string
		status int
		header map[string]string
		body   string
		want   string
	}{
		{name: "JSON object", status: 200, header: map[string]string{"Content-Type": "application/json"}, body: "{\"id\": \"ch_1\"}\n", want: `{"id":"ch_1"}`},
		{name: "JSON without content type", status: 201, body: `[1,2]`, want: `[1,2]`},
		{name: "text", status: 200, header: map[string]string{"Content-Type": "text/plain"}, body: "OK\n", want: `{"status":200,"body":"OK\n"}`},
		{name: "no content", status: 204, want: `{"status":204,"body":""}`},
		{name: "accepted with text", status: 202, body: "queued", want: `{"status":202,"body":"queued"}`},
		{name: "HEAD", method: "HEAD", status: 200, body: "", want: `{"status":200,"body":""}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv, _ := recordingServer(t, tt.status, tt.header, tt.body)
			c := map[string]any{"url": srv.URL + "/x"}
			if tt.method != "" {
				c["method"] = tt.method
			}
			res, err := HTTP(context.Background(), srv.Client(), Request{Step: "s", Attempt: 1, Config: httpCfg(t, c)})
			require.NoError(t, err)
			require.JSONEq(t, tt.want, string(res))
		})
	}
}

func TestHTTPRequest(t *testing.T) {
	t.Parallel()
	req := Request{
		TaskID:  9,
		Step:    "charge",
		Attempt: 2,
		Input:   json.RawMessage(`{"amount": 1000000, "name": "Zoë \"Z\"", "path": "charges"}`),
		Deps:    map[string]json.RawMessage{"reserve": json.RawMessage(`{"id":"r_5"}`)},
	}
	tests := []struct {
		name       string
		config     map[string]any
		req        Request
		path       string // the url template's path; default {{.input.path}}
		wantMethod string
		wantURI    string
		wantHeader map[string]string // "" means absent
		wantBody   string
		bodyIsJSON bool
	}{
		{
			name:       "GET sends no body",
			config:     map[string]any{"headers": map[string]string{"Authorization": "Bearer t", "X-Trace": "1"}},
			req:        req,
			wantMethod: "GET",
			wantURI:    "/api/charges",
			wantHeader: map[string]string{"Authorization": "Bearer t", "X-Trace": "1", "Content-Type": ""},
			wantBody:   "",
		},
		{
			name:       "POST defaults to the step context",
			config:     map[string]any{"method": "post"},
			req:        req,
			wantMethod: "POST",
			wantURI:    "/api/charges",
			wantHeader: map[string]string{"Content-Type": "application/json"},
			wantBody: `{"task_id":9,"step":"charge","attempt":2,"input":{"amount":1000000,"name":"Zoë \"Z\"","path":"charges"},` +
				`"deps":{"reserve":{"id":"r_5"}},"config":{"method":"post","url":"URL"},"checkpoint":null}`,
			bodyIsJSON: true,
		},
		{
			name:       "PUT of a nil input sends {}",
			config:     map[string]any{"method": "PUT"},
			req:        Request{TaskID: 1, Step: "s", Attempt: 1},
			path:       "t{{.task_id}}",
			wantMethod: "PUT",
			wantURI:    "/api/t1",
			wantHeader: map[string]string{"Content-Type": "application/json"},
			wantBody:   `{"task_id":1,"step":"s","attempt":1,"input":{},"deps":{},"config":{"method":"PUT","url":"URL"},"checkpoint":null}`,
			bodyIsJSON: true,
		},
		{
			name: "body template",
			config: map[string]any{
				"method": "PATCH",
				"body":   `{"amount": {{.input.amount}}, "name": {{json .input.name}}, "reserve": "{{.deps.reserve.id}}", "task": {{.task_id}}, "attempt": {{.attempt}}}`,
			},
			req:        req,
			wantMethod: "PATCH",
			wantURI:    "/api/charges",
			wantHeader: map[string]string{"Content-Type": "application/json"},
			wantBody:   `{"amount": 1000000, "name": "Zoë \"Z\"", "reserve": "r_5", "task": 9, "attempt": 2}`,
		},
		{
			name:       "text body template has no content type",
			config:     map[string]any{"method": "POST", "body": `amount={{.input.amount}}`},
			req:        req,
			wantMethod: "POST",
			wantURI:    "/api/charges",
			wantHeader: map[string]string{"Content-Type": ""},
			wantBody:   `amount=1000000`,
		},
		{
			name: "configured content type wins",
			config: map[string]any{
				"method":  "POST",
				"body":    `{"a":1}`,
				"headers": map[string]string{"content-type": "application/vnd.api+json"},
			},
			req:        req,
			wantMethod: "POST",
			wantURI:    "/api/charges",
			wantHeader: map[string]string{"Content-Type": "application/vnd.api+json"},
			wantBody:   `{"a":1}`,
		},
		{
			name:       "DELETE without body",
			config:     map[string]any{"method": "DELETE"},
			req:        req,
			wantMethod: "DELETE",
			wantURI:    "/api/charges",
			wantHeader: map[string]string{"Content-Type": ""},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv, seen := recordingServer(t, 200, nil, `{"ok":true}`)
			// The url is a template too.
			path := tt.path
			if path == "" {
				path = "{{.input.path}}"
			}
			rawURL := srv.URL + "/api/" + path
			config := map[string]any{"url": rawURL}
			for k, v := range tt.config {
				config[k] = v
			}
			req := tt.req
			req.Config = httpCfg(t, config)

			res, err := HTTP(context.Background(), srv.Client(), req)
			require.NoError(t, err)
			require.JSONEq(t, `{"ok":true}`, string(res))

			got := <-seen
			require.Equal(t, tt.wantMethod, got.method)
			require.Equal(t, tt.wantURI, got.uri)
			for k, v := range tt.wantHeader {
				require.Equal(t, v, got.header.Get(k), "header %s", k)
			}
			want := strings.ReplaceAll(tt.wantBody, `"URL"`, mustJSON(t, rawURL))
			if tt.bodyIsJSON {
				require.JSONEq(t, want, got.body)
			} else {
				require.Equal(t, want, got.body)
			}
		})
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

func TestHTTPHostHeader(t *testing.T) {
	t.Parallel()
	srv, seen := recordingServer(t, 200, nil, `{}`)
	cfg := httpCfg(t, map[string]any{"url": srv.URL, "headers": map[string]string{"Host": "api.example.com"}})
	_, err := HTTP(context.Background(), srv.Client(), Request{Step: "s", Attempt: 1, Config: cfg})
	require.NoError(t, err)
	require.Equal(t, "api.example.com", (<-seen).host)
}

func TestHTTPFailures(t *testing.T) {
	t.Parallel()
	future := time.Now().Add(time.Hour).UTC().Format(http.TimeFormat)
	past := time.Now().Add(-time.Hour).UTC().Format(http.TimeFormat)
	longBody := "E" + strings.Repeat("x", 5000) + "TAIL"

	tests := []struct {
		name      string
		method    string
		status    int
		header    map[string]string
		body      string
		permanent bool
		// retryAfter is the expected delay of a RetryAfterError; minDelay,
		// when set, makes it a range for HTTP dates.
		retryAfter time.Duration
		minDelay   time.Duration
		// want is the message after "<METHOD> <URL>: ".
		want string
	}{
		{name: "500", status: 500, body: "database is down\n", want: "500 Internal Server Error: database is down"},
		{name: "502 without body", status: 502, want: "502 Bad Gateway"},
		{name: "503 with Retry-After seconds", method: "POST", status: 503, header: map[string]string{"Retry-After": "7"}, body: "busy", retryAfter: 7 * time.Second, want: "503 Service Unavailable: busy"},
		{name: "429 with Retry-After date", status: 429, header: map[string]string{"Retry-After": future}, body: "slow down", minDelay: 58 * time.Minute, retryAfter: time.Hour, want: "429 Too Many Requests: slow down"},
		{name: "429 with Retry-After date in the past", status: 429, header: map[string]string{"Retry-After": past}, retryAfter: 0, minDelay: -1, want: "429 Too Many Requests"},
		{name: "429 without Retry-After", status: 429, want: "429 Too Many Requests"},
		{name: "503 with bad Retry-After", status: 503, header: map[string]string{"Retry-After": "soon"}, want: "503 Service Unavailable"},
		{name: "long body is cut", status: 500, body: longBody, want: "500 Internal Server Error: " + longBody[:httpErrorBody]},
		{name: "404", status: 404, body: `{"error":"no such charge"}`, permanent: true, want: `404 Not Found: {"error":"no such charge"}`},
		{name: "400", method: "PUT", status: 400, body: "bad amount", permanent: true, want: "400 Bad Request: bad amount"},
		{name: "401 ignores Retry-After", status: 401, header: map[string]string{"Retry-After": "5"}, permanent: true, want: "401 Unauthorized"},
		{name: "304", status: 304, permanent: true, want: "304 Not Modified"},
		{name: "302 not followed", status: 302, header: map[string]string{"Location": "/elsewhere"}, permanent: true, want: "302 Found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv, _ := recordingServer(t, tt.status, tt.header, tt.body)
			client := srv.Client()
			client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
			method := tt.method
			if method == "" {
				method = "GET"
			}
			cfg := httpCfg(t, map[string]any{"url": srv.URL + "/charges?id=1", "method": method})

			res, err := HTTP(context.Background(), client, Request{Step: "s", Attempt: 1, Config: cfg})
			require.Nil(t, res)
			require.Error(t, err)
			require.Equal(t, tt.permanent, outcome.IsPermanent(err), "error: %v", err)

			wantMsg := method + " " + srv.URL + "/charges?id=1: " + tt.want
			var ra *outcome.RetryAfterError
			switch {
			case tt.permanent:
				require.EqualError(t, errors.Unwrap(err), wantMsg)
			case tt.retryAfter > 0 || tt.minDelay != 0:
				require.ErrorAs(t, err, &ra)
				if tt.minDelay > 0 {
					require.GreaterOrEqual(t, ra.Delay, tt.minDelay)
					require.LessOrEqual(t, ra.Delay, tt.retryAfter)
				} else {
					require.Equal(t, tt.retryAfter, ra.Delay)
				}
				require.EqualError(t, ra.Err, wantMsg)
			default:
				require.False(t, errors.As(err, &ra), "unexpected RetryAfterError: %v", err)
				require.EqualError(t, err, wantMsg)
			}
		})
	}
}

func TestHTTPTransportErrors(t *testing.T) {
	t.Parallel()
	closed := httptest.NewServer(http.NotFoundHandler())
	closedURL := closed.URL
	closed.Close()

	// hang answers only when the client gives up.
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	}))
	t.Cleanup(hang.Close)

	tests := []struct {
		name   string
		config map[string]any
		ctx    func() (context.Context, context.CancelFunc)
		wantIs error
	}{
		{name: "connection refused", config: map[string]any{"url": closedURL}},
		{name: "config timeout", config: map[string]any{"url": hang.URL, "timeout": "50ms"}, wantIs: context.DeadlineExceeded},
		{
			name:   "cancelled",
			config: map[string]any{"url": hang.URL},
			ctx: func() (context.Context, context.CancelFunc) {
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				return ctx, cancel
			},
			wantIs: context.Canceled,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			if tt.ctx != nil {
				var cancel context.CancelFunc
				ctx, cancel = tt.ctx()
				defer cancel()
			}
			res, err := HTTP(ctx, hang.Client(), Request{Step: "s", Attempt: 1, Config: httpCfg(t, tt.config)})
			require.Nil(t, res)
			require.Error(t, err)
			require.False(t, outcome.IsPermanent(err), "error: %v", err)
			var ra *outcome.RetryAfterError
			require.False(t, errors.As(err, &ra))
			if tt.wantIs != nil {
				require.ErrorIs(t, err, tt.wantIs)
			}
		})
	}
}

func TestHTTPBodyCap(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		chunk := strings.Repeat("a", 1<<20)
		for range maxHTTPBody >> 20 {
			if _, err := io.WriteString(w, chunk); err != nil {
				return
			}
		}
		_, _ = io.WriteString(w, "!")
	}))
	t.Cleanup(srv.Close)
	_, err := HTTP(context.Background(), srv.Client(), Request{Step: "s", Attempt: 1, Config: httpCfg(t, map[string]any{"url": srv.URL})})
	require.Error(t, err)
	require.True(t, outcome.IsPermanent(err))
	require.ErrorContains(t, err, "response body exceeds 16777216 bytes")
}

func TestHTTPTemplateErrors(t *testing.T) {
	t.Parallel()
	srv, _ := recordingServer(t, 200, nil, `{}`)
	tests := []struct {
		name   string
		config map[string]any
		want   string
	}{
		{name: "missing key in body", config: map[string]any{"url": srv.URL, "method": "POST", "body": `{{.input.nope}}`}, want: `config.body: `},
		{name: "missing key in url", config: map[string]any{"url": srv.URL + "/{{.deps.a.id}}"}, want: `config.url: `},
		{name: "rendered url is not http", config: map[string]any{"url": "{{.input.target}}"}, want: `rendered config.url: "ftp://host/x" is not an http or https URL`},
		{name: "invalid config", config: map[string]any{"url": srv.URL, "method": "BREW"}, want: `config.method: "BREW" is not one of`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req := Request{Step: "s", Attempt: 1, Input: json.RawMessage(`{"target":"ftp://host/x"}`), Config: httpCfg(t, tt.config)}
			_, err := HTTP(context.Background(), srv.Client(), req)
			require.Error(t, err)
			require.True(t, outcome.IsPermanent(err), "error: %v", err)
			require.ErrorContains(t, err, tt.want)
		})
	}
}

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		in     string
		want   time.Duration
		wantOK bool
	}{
		{in: "0", want: 0, wantOK: true},
		{in: " 120 ", want: 2 * time.Minute, wantOK: true},
		{in: "999999999999", want: maxRetryAfter, wantOK: true},
		{in: "-1"},
		{in: "1.5"},
		{in: ""},
		{in: "Sat, 01 Mar 2025 12:00:30 GMT", want: 30 * time.Second, wantOK: true},
		{in: "Saturday, 01-Mar-25 12:01:00 GMT", want: time.Minute, wantOK: true},
		{in: "Sat Mar  1 12:00:05 2025", want: 5 * time.Second, wantOK: true},
		{in: "Sat, 01 Mar 2025 11:00:00 GMT", want: 0, wantOK: true},
		{in: "Sat, 08 Mar 2025 12:00:00 GMT", want: maxRetryAfter, wantOK: true},
		{in: "tomorrow"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			got, ok := parseRetryAfter(tt.in, now)
			require.Equal(t, tt.wantOK, ok)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestValidateHTTPConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		config string
		want   string // "" for valid
	}{
		{name: "minimal", config: `{"url":"https://api.example.com/v1"}`},
		{name: "full", config: `{"url":"http://localhost:8080/x","method":"post","headers":{"X-Key":"v"},"body":"{{json .input}}","timeout":"30s"}`},
		{name: "url template", config: `{"url":"{{.input.base}}/charges"}`},
		{name: "null optional fields", config: `{"url":"https://a.example","method":null,"headers":null,"body":null,"timeout":null}`},
		{name: "missing config", config: ``, want: "config.url: is required"},
		{name: "not an object", config: `"https://a.example"`, want: "config: must be a JSON object"},
		{name: "missing url", config: `{"method":"GET"}`, want: "config.url: is required"},
		{name: "url not a string", config: `{"url":1}`, want: "config.url: must be a string"},
		{name: "url scheme", config: `{"url":"ftp://a.example/x"}`, want: `config.url: "ftp://a.example/x" is not an http or https URL`},
		{name: "relative url", config: `{"url":"/charges"}`, want: `config.url: "/charges" is not an http or https URL`},
		{name: "url without host", config: `{"url":"http:///x"}`, want: `config.url: "http:///x" has no host`},
		{name: "url password redacted", config: `{"url":"ftp://u:secret@a.example"}`, want: `config.url: "ftp://u:xxxxx@a.example" is not an http or https URL`},
		{name: "bad url template", config: `{"url":"https://a.example/{{.input"}`, want: "config.url: parse template: template: url:1: unclosed action"},
		{name: "bad method", config: `{"url":"https://a.example","method":"FETCH"}`, want: `config.method: "FETCH" is not one of GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS`},
		{name: "method not a string", config: `{"url":"https://a.example","method":1}`, want: "config.method: must be a string"},
		{name: "headers not strings", config: `{"url":"https://a.example","headers":{"A":["b"]}}`, want: "config.headers: must be an object of strings"},
		{name: "bad header name", config: `{"url":"https://a.example","headers":{"Bad Name":"x"}}`, want: `config.headers: "Bad Name" is not a valid header name`},
		{name: "header injection", config: `{"url":"https://a.example","headers":{"X":"a\r\nEvil: 1"}}`, want: "config.headers.X: must not contain CR, LF or NUL"},
		{name: "body not a string", config: `{"url":"https://a.example","body":{"a":1}}`, want: "config.body: must be a string"},
		{name: "bad body template", config: `{"url":"https://a.example","body":"{{if}}"}`, want: "config.body: parse template: template: body:1: missing value for if"},
		{name: "bad timeout", config: `{"url":"https://a.example","timeout":"10"}`, want: `config.timeout: "10" is not a positive Go duration such as "30s"`},
		{name: "negative timeout", config: `{"url":"https://a.example","timeout":"-1s"}`, want: `config.timeout: "-1s" is not a positive Go duration such as "30s"`},
		{name: "numeric timeout", config: `{"url":"https://a.example","timeout":30}`, want: `config.timeout: must be a Go duration string such as "30s"`},
		{name: "unknown field", config: `{"url":"https://a.example","retries":3}`, want: "config.retries: unknown field (allowed: url, method, headers, body, timeout)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := ValidateHTTPConfig(json.RawMessage(tt.config))
			if tt.want == "" {
				require.NoError(t, err)
				return
			}
			require.EqualError(t, err, tt.want)
		})
	}
}
