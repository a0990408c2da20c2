package builtin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"text/template"
	"time"
	"unicode/utf8"

	"github.com/weftrun/weft/internal/outcome"
	"github.com/weftrun/weft/internal/textsafe"
)

// Limits of the http handler.
const (
	// maxHTTPBody caps the response body of a successful call.
	maxHTTPBody = 16 << 20
	// httpErrorBody is how much of a failed call's body its error quotes.
	httpErrorBody = 512
	// maxRetryAfter bounds the delay a Retry-After header can ask for.
	maxRetryAfter = 24 * time.Hour
)

// httpMethods are the methods an http step may use.
var httpMethods = []string{
	http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut,
	http.MethodPatch, http.MethodDelete, http.MethodOptions,
}

var httpFields = []string{"url", "method", "headers", "body", "timeout"}

// httpConfig is the parsed config of an http step.
type httpConfig struct {
	url     *template.Template
	method  string
	headers map[string]string
	body    *template.Template // nil when the config has no body
	timeout time.Duration      // zero for none
}

// ValidateHTTPConfig checks the config of an http step at workflow
// registration. The config is an object with
//
//   - url: the URL to call, http or https (required); a text/template;
//   - method: GET (the default), HEAD, POST, PUT, PATCH, DELETE or OPTIONS;
//   - headers: an object of strings; a value may name secrets as
//     ${secret:NAME}, as may url and body, resolved when the step runs
//     (see SecretLookup) and never stored, logged or returned;
//   - body: the request body, a text/template;
//   - timeout: a Go duration bounding the call, such as "30s".
//
// Templates are executed with the step context, so {{.input.amount}} and
// {{.deps.reserve.id}} work; a missing key is an error, and the function json
// encodes a value as JSON. A url without template actions is checked here;
// one with actions is checked once rendered.
//
// The error names the offending field, as in "config.url: is required".
// Unknown fields are errors.
func ValidateHTTPConfig(config json.RawMessage) error {
	_, err := parseHTTPConfig(config)
	return err
}

func parseHTTPConfig(config json.RawMessage) (*httpConfig, error) {
	fields, err := configObject(config, httpFields...)
	if err != nil {
		return nil, err
	}
	var c httpConfig

	var rawURL string
	if err := decodeField(fields, "url", "a string", &rawURL); err != nil {
		return nil, err
	}
	if rawURL == "" {
		return nil, errors.New("config.url: is required")
	}
	if err := checkSecretRefs(rawURL); err != nil {
		return nil, fmt.Errorf("config.url: %w", err)
	}
	if c.url, err = parseTemplate("url", secretTemplate(rawURL)); err != nil {
		return nil, fmt.Errorf("config.url: %w", err)
	}
	if !strings.Contains(rawURL, "{{") && !strings.Contains(rawURL, "${secret:") {
		if err := checkURL(rawURL); err != nil {
			return nil, fmt.Errorf("config.url: %w", err)
		}
	}

	c.method = http.MethodGet
	if err := decodeField(fields, "method", "a string", &c.method); err != nil {
		return nil, err
	}
	c.method = strings.ToUpper(c.method)
	if !slices.Contains(httpMethods, c.method) {
		return nil, fmt.Errorf("config.method: %q is not one of %s", c.method, strings.Join(httpMethods, ", "))
	}

	if c.headers, err = stringMap(fields, "headers"); err != nil {
		return nil, err
	}
	for _, k := range sortedKeys(c.headers) {
		if !validHeaderName(k) {
			return nil, fmt.Errorf("config.headers: %q is not a valid header name", k)
		}
		if strings.ContainsAny(c.headers[k], "\r\n\x00") {
			return nil, fmt.Errorf("config.headers.%s: must not contain CR, LF or NUL", k)
		}
		if err := checkSecretRefs(c.headers[k]); err != nil {
			return nil, fmt.Errorf("config.headers.%s: %w", k, err)
		}
	}

	if present(fields, "body") {
		var body string
		if err := decodeField(fields, "body", "a string", &body); err != nil {
			return nil, err
		}
		if err := checkSecretRefs(body); err != nil {
			return nil, fmt.Errorf("config.body: %w", err)
		}
		if c.body, err = parseTemplate("body", secretTemplate(body)); err != nil {
			return nil, fmt.Errorf("config.body: %w", err)
		}
	}

	if present(fields, "timeout") {
		var s string
		if err := decodeField(fields, "timeout", `a Go duration string such as "30s"`, &s); err != nil {
			return nil, err
		}
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf(`config.timeout: %q is not a positive Go duration such as "30s"`, s)
		}
		c.timeout = d
	}
	return &c, nil
}

// checkURL accepts absolute http and https URLs with a host.
func checkURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("invalid URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("%q is not an http or https URL", u.Redacted())
	}
	if u.Host == "" {
		return fmt.Errorf("%q has no host", u.Redacted())
	}
	return nil
}

// validHeaderName reports whether s is an RFC 9110 token.
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

func render(t *template.Template, data map[string]any) (string, error) {
	var b strings.Builder
	if err := t.Execute(&b, data); err != nil {
		return "", fmt.Errorf("config.%s: %w", t.Name(), err)
	}
	return b.String(), nil
}

// HTTP calls the URL of an http step with client, or http.DefaultClient when
// client is nil.
//
// The request body is the rendered body template when the config has one;
// otherwise POST, PUT and PATCH send the step context as JSON. A body that is
// JSON is sent with Content-Type application/json unless the config's headers
// say otherwise.
//
// A 2xx response succeeds: a JSON body is the result, any other body gives
// {"status": N, "body": "<text>"} (each NUL and each byte that is not UTF-8
// of the text replaced with U+FFFD); a body over 16 MiB is a PermanentError.
// A 5xx or 429 response is a plain error, or a RetryAfterError when the
// response has a Retry-After header (seconds or an HTTP date, capped at 24h).
// Any other status, such as a 4xx or a 3xx the client did not follow, is a
// PermanentError. The errors name the method, URL and status and quote the
// start of the body. Transport errors are plain errors. A config or template
// that cannot produce a request is a PermanentError.
func HTTP(ctx context.Context, client *http.Client, req Request) (json.RawMessage, error) {
	s := newSecrets(ctx, req.Secrets)
	return s.clean(callHTTP(ctx, client, req, s))
}

// callHTTP is HTTP, resolving secrets with s.
func callHTTP(ctx context.Context, client *http.Client, req Request, s *secrets) (json.RawMessage, error) {
	cfg, err := parseHTTPConfig(req.Config)
	if err != nil {
		return nil, &outcome.PermanentError{Err: fmt.Errorf("http step %q: invalid config: %w", req.Step, err)}
	}
	sc, err := contextJSON(req)
	if err != nil {
		return nil, &outcome.PermanentError{Err: err}
	}
	data, err := templateData(sc)
	if err != nil {
		return nil, &outcome.PermanentError{Err: err}
	}
	cfg.url.Funcs(s.funcs())
	if cfg.body != nil {
		cfg.body.Funcs(s.funcs())
	}
	target, err := render(cfg.url, data)
	if err != nil {
		return nil, &outcome.PermanentError{Err: fmt.Errorf("http step %q: %w", req.Step, err)}
	}
	if err := checkURL(target); err != nil {
		return nil, &outcome.PermanentError{Err: fmt.Errorf("http step %q: rendered config.url: %w", req.Step, err)}
	}

	var body []byte
	switch {
	case cfg.body != nil:
		text, err := render(cfg.body, data)
		if err != nil {
			return nil, &outcome.PermanentError{Err: fmt.Errorf("http step %q: %w", req.Step, err)}
		}
		body = []byte(text)
	case cfg.method == http.MethodPost || cfg.method == http.MethodPut || cfg.method == http.MethodPatch:
		body = sc
	}

	if cfg.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.timeout)
		defer cancel()
	}
	var bodyReader io.Reader
	if body != nil {
		bodyReader = bytes.NewReader(body)
	}
	hreq, err := http.NewRequestWithContext(ctx, cfg.method, target, bodyReader)
	if err != nil {
		return nil, &outcome.PermanentError{Err: fmt.Errorf("http step %q: build request: %w", req.Step, err)}
	}
	for _, k := range sortedKeys(cfg.headers) {
		v, err := s.expand(cfg.headers[k])
		if err != nil {
			return nil, &outcome.PermanentError{Err: fmt.Errorf("http step %q: config.headers.%s: %w", req.Step, k, err)}
		}
		if http.CanonicalHeaderKey(k) == "Host" {
			hreq.Host = v
			continue
		}
		hreq.Header.Set(k, v)
	}
	// A client span under the attempt's, when the attempt is traced: the
	// callee continues it. Its url.full leaves out the query and any
	// credentials, and has resolved secrets replaced by their names: in
	// the URL as net/url writes it, before the query is cut, so that a
	// secret with a '?' is not cut in two.
	noUser := *hreq.URL
	noUser.User = nil
	urlFull, _, _ := strings.Cut(s.redact(noUser.String()), "?")
	urlFull, _, _ = strings.Cut(urlFull, "#")
	hreq, span := startClientSpan(hreq, urlFull)
	defer span.End()
	for k, v := range traceContext(hreq.Context()) {
		hreq.Header.Set(k, v)
	}
	if len(body) > 0 && hreq.Header.Get("Content-Type") == "" && json.Valid(body) {
		hreq.Header.Set("Content-Type", "application/json")
	}

	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(hreq)
	endClientSpan(span, resp, err, s.redact)
	if err != nil {
		return nil, fmt.Errorf("http step %q: %w", req.Step, err)
	}
	defer resp.Body.Close()
	where := resp.Request.Method + " " + resp.Request.URL.Redacted()

	if resp.StatusCode >= 200 && resp.StatusCode <= 299 {
		b, err := io.ReadAll(io.LimitReader(resp.Body, maxHTTPBody+1))
		if err != nil {
			return nil, fmt.Errorf("%s: %s: read body: %w", where, resp.Status, err)
		}
		if len(b) > maxHTTPBody {
			return nil, &outcome.PermanentError{Err: fmt.Errorf("%s: %s: response body exceeds %d bytes", where, resp.Status, maxHTTPBody)}
		}
		if res, ok := jsonResult(b); ok {
			return res, nil
		}
		res, err := json.Marshal(struct {
			Status int    `json:"status"`
			Body   string `json:"body"`
		}{resp.StatusCode, textsafe.String(s.redact(string(b)))})
		if err != nil {
			return nil, fmt.Errorf("%s: encode result: %w", where, err)
		}
		return res, nil
	}

	// The body only feeds the message, so a read error just shortens it.
	// Secrets are replaced before the excerpt is cut, so that it cannot
	// cut one: read enough to find a whole one at its end.
	limit := httpErrorBody + utf8.UTFMax + s.red.longest()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, int64(limit)))
	if len(b) == limit {
		b = s.red.head(b)
	}
	if json.Valid(b) {
		b = s.red.json(b)
	} else {
		b = []byte(s.redact(string(b)))
	}
	failure := fmt.Errorf("%s: %s", where, resp.Status)
	if text := excerpt(b, httpErrorBody, false); text != "" {
		failure = fmt.Errorf("%s: %s: %s", where, resp.Status, text)
	}
	if resp.StatusCode == http.StatusTooManyRequests || (resp.StatusCode >= 500 && resp.StatusCode <= 599) {
		if ra := resp.Header.Get("Retry-After"); ra != "" {
			if d, ok := parseRetryAfter(ra, time.Now()); ok {
				return nil, &outcome.RetryAfterError{Err: failure, Delay: d}
			}
		}
		return nil, failure
	}
	return nil, &outcome.PermanentError{Err: failure}
}

// parseRetryAfter reads a Retry-After value, delay-seconds or an HTTP date,
// as a delay from now, clamped to [0, maxRetryAfter].
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs < 0 {
			return 0, false
		}
		if secs > int64(maxRetryAfter/time.Second) {
			return maxRetryAfter, true
		}
		return time.Duration(secs) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return min(max(t.Sub(now), 0), maxRetryAfter), true
}
