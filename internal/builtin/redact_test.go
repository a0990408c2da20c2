package builtin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode/utf16"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// leaky is a secret that every encoding changes: a leading space (which a
// server trims from a header), the delimiters of a URL, a letter that is
// not ASCII, HTML's specials and JSON's.
const leaky = ` p@ss w/rd?&=ü<>"\`

// leakyLookup resolves every secret to leaky.
func leakyLookup(context.Context, string) (string, error) { return leaky, nil }

var hexEscape = regexp.MustCompile(`%[0-9A-F]{2}`)

// lowerHex writes the %-escapes of s with lower-case hex.
func lowerHex(s string) string { return hexEscape.ReplaceAllStringFunc(s, strings.ToLower) }

// escapeAll %-encodes every byte of s but letters, digits and -._~ (RFC
// 3986's unreserved characters).
func escapeAll(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-._~", c) >= 0 {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

// inJSON returns s as a JSON string holds it, without the quotes.
func inJSON(s string, escapeHTML bool) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(escapeHTML)
	if err := enc.Encode(s); err != nil {
		panic(err)
	}
	q := strings.TrimSuffix(b.String(), "\n")
	return q[1 : len(q)-1]
}

// asciiJSON writes the characters of a JSON string's text that are not
// ASCII as \u escapes, as Python's json.dumps does.
func asciiJSON(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r < 0x80 {
			b.WriteRune(r)
			continue
		}
		for _, u := range utf16.Encode([]rune{r}) {
			fmt.Fprintf(&b, `\u%04x`, u)
		}
	}
	return b.String()
}

// inURL returns s as net/url writes it after prefix.
func inURL(prefix, s string) string {
	u, err := url.Parse(prefix + s)
	if err != nil {
		panic(err)
	}
	return strings.TrimPrefix(u.String(), prefix)
}

// leakForms are the forms a secret takes on its way out of a step: none
// may be in what the step returns.
var leakForms = []struct {
	name string
	of   func(string) string
}{
	{"as it is", func(v string) string { return v }},
	{"as a server reads a header", func(v string) string { return strings.Trim(v, " \t") }},
	{"url.PathEscape", url.PathEscape},
	{"url.PathEscape, lower-case hex", func(v string) string { return lowerHex(url.PathEscape(v)) }},
	{"url.QueryEscape", url.QueryEscape},
	{"url.QueryEscape, lower-case hex", func(v string) string { return lowerHex(url.QueryEscape(v)) }},
	{"in a URL's path, as net/url writes it", func(v string) string { return inURL("http://h/", v) }},
	{"in a URL's path, as net/url writes it, lower-case hex", func(v string) string { return lowerHex(inURL("http://h/", v)) }},
	{"in a URL's query, as net/url writes it", func(v string) string { return inURL("http://h/?", v) }},
	{"all but letters, digits and -._~ %-encoded", escapeAll},
	{"all but letters, digits and -._~ %-encoded, lower-case hex", func(v string) string { return lowerHex(escapeAll(v)) }},
	{"in a JSON string (json.Marshal, with \\u003c)", func(v string) string { return inJSON(v, true) }},
	{"in a JSON string without HTML escapes", func(v string) string { return inJSON(v, false) }},
	{"in an ASCII JSON string", func(v string) string { return asciiJSON(inJSON(v, false)) }},
	{"Go-quoted (%q)", func(v string) string { q := strconv.Quote(v); return q[1 : len(q)-1] }},
	{"Go-quoted in ASCII (%+q)", func(v string) string { q := strconv.QuoteToASCII(v); return q[1 : len(q)-1] }},
}

// requireNoLeak checks that text has the secret leaky in none of its
// forms, nor each form quoted in a Go or a JSON string (as an error or a
// result quotes it), and [secret:S] in its place.
func requireNoLeak(t *testing.T, text string) {
	t.Helper()
	for _, f := range leakForms {
		form := f.of(leaky)
		goQuoted := strconv.Quote(form)
		for quote, q := range map[string]string{"": form, ", Go-quoted": goQuoted[1 : len(goQuoted)-1], ", in a JSON string": inJSON(form, true)} {
			require.NotContains(t, text, q, "the secret %s%s", f.name, quote)
		}
	}
	require.Contains(t, text, "[secret:S]")
}

// echoServer answers /echo?form=N&as=AS with the form N of leaky (of
// leakForms) in its body: as text (200), JSON (200), a failure (500), a
// failure as JSON (400) or a failure whose start only its error quotes
// (cut). /redirect?to=TO redirects to a URL with the secret in its path
// and query, on this server (service) or one that cannot be reached
// (nowhere), or to one net/http cannot parse (unparsable); /body echoes
// the request body in a JSON object, as httpbin does. Each request must
// carry leaky in its X-Token header.
func echoServer(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Token") != strings.TrimSpace(leaky) {
			http.Error(w, "no token", http.StatusUnauthorized)
			return
		}
		q := r.URL.Query()
		switch {
		case r.URL.Path == "/redirect":
			w.Header().Set("Location", map[string]string{
				"service":    "/landing/" + url.PathEscape(leaky) + "?k=" + url.QueryEscape(leaky),
				"nowhere":    "http://127.0.0.1:1/" + url.PathEscape(leaky) + "?k=" + url.QueryEscape(leaky),
				"unparsable": "http://[::1" + leaky,
			}[q.Get("to")])
			w.WriteHeader(http.StatusFound)
			return
		case strings.HasPrefix(r.URL.Path, "/landing/"):
			http.Error(w, "gone", http.StatusGone)
			return
		case r.URL.Path == "/body":
			var b bytes.Buffer
			_, _ = b.ReadFrom(r.Body)
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]string{"data": b.String()})
			return
		}
		n, err := strconv.Atoi(q.Get("form"))
		if err != nil || n < 0 || n >= len(leakForms) {
			http.Error(w, "no form", http.StatusNotFound)
			return
		}
		form := leakForms[n].of(leaky)
		switch q.Get("as") {
		case "text":
			_, _ = fmt.Fprintf(w, "got %s", form)
		case "json":
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]string{"got": form})
		case "error":
			http.Error(w, "bad token "+form, http.StatusInternalServerError)
		case "json error":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(w).Encode(map[string]string{"error": "bad token " + form})
		case "cut":
			http.Error(w, strings.Repeat("x", httpErrorBody-12)+form, http.StatusInternalServerError)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// stepOutput is all a step returns, its result and its error.
func stepOutput(res json.RawMessage, err error) string {
	out := string(res)
	if err != nil {
		out += "\n" + err.Error()
	}
	return out
}

// TestHTTPSecretInNoForm: an http step that puts a secret in its URL's
// path and query and in a header returns it in no form, whether an error
// of net/http quotes the URL (percent-encoded) or the service echoes it
// in any encoding, in a result or an error, after a redirect, or cut by
// the length of the excerpt an error quotes.
func TestHTTPSecretInNoForm(t *testing.T) {
	t.Parallel()
	srv := echoServer(t)
	headers := map[string]string{"X-Token": "${secret:S}"}
	type scenario struct {
		name   string
		config map[string]any
		// prefix: the start of each form must not show either (a cut).
		prefix bool
	}
	scenarios := []scenario{
		{name: "unreachable URL", config: map[string]any{"url": "http://127.0.0.1:1/p/${secret:S}?k=${secret:S}&j={{json (secret \"S\")}}", "headers": headers}},
		{name: "redirect to a URL with the secret", config: map[string]any{"url": srv.URL + "/redirect?to=service", "headers": headers}},
		{name: "redirect to an unreachable URL with the secret", config: map[string]any{"url": srv.URL + "/redirect?to=nowhere", "headers": headers}},
		{name: "a Location header net/http cannot parse", config: map[string]any{"url": srv.URL + "/redirect?to=unparsable", "headers": headers}},
		{name: "the request body echoed in JSON", config: map[string]any{"url": srv.URL + "/body", "method": "POST", "body": `{"t": {{json (secret "S")}}}`, "headers": headers}},
	}
	for n, f := range leakForms {
		for _, as := range []string{"text", "json", "error", "json error", "cut"} {
			scenarios = append(scenarios, scenario{name: f.name + " echoed as " + as, prefix: as == "cut",
				config: map[string]any{"url": fmt.Sprintf("%s/echo?form=%d&as=%s", srv.URL, n, url.QueryEscape(as)), "headers": headers}})
		}
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			res, err := HTTP(context.Background(), srv.Client(), Request{Step: "s", Secrets: leakyLookup, Config: httpCfg(t, sc.config)})
			out := stepOutput(res, err)
			require.NotContains(t, out, "no token", "the service got the secret")
			requireNoLeak(t, out)
			if sc.prefix {
				for _, f := range leakForms {
					require.NotContains(t, out, f.of(leaky)[:8], "the start of the secret %s", f.name)
				}
			}
		})
	}
}

// TestHTTPSecretNotInSpan: the client span of a traced http step records
// a failure that quotes the URL without the secret.
func TestHTTPSecretNotInSpan(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ctx, attempt := tp.Tracer("test").Start(context.Background(), "process")
	_, err := HTTP(ctx, nil, Request{Step: "s", Secrets: leakyLookup,
		Config: httpCfg(t, map[string]any{"url": "http://127.0.0.1:1/p/${secret:S}?k=${secret:S}"})})
	require.Error(t, err)
	attempt.End()
	spans := exp.GetSpans()
	i := slices.IndexFunc(spans, func(sp tracetest.SpanStub) bool { return sp.SpanKind == trace.SpanKindClient })
	require.GreaterOrEqual(t, i, 0, "a client span")
	text := spans[i].Status.Description
	for _, kv := range spans[i].Attributes {
		text += "\n" + kv.Value.String()
	}
	requireNoLeak(t, text)
}

// TestRedactor: what a step returns has its secrets replaced, in JSON
// however escaped (a document that replacing breaks becomes a string),
// and the part of one that a limit cut is dropped.
func TestRedactor(t *testing.T) {
	t.Parallel()
	red := newRedactor(map[string]string{"S": leaky, "PIN": "12345"})
	tests := []struct {
		name string
		got  string
		want string
	}{
		{"text", red.text("a" + url.QueryEscape(leaky) + "b 12345"), "a[secret:S]b [secret:PIN]"},
		{"JSON escaped in full", string(red.json([]byte(`{"k":"\u0020\u0070@ss w/rd?&=\u00fc<>\"\\"}`))), `{"k":"[secret:S]"}`},
		{"JSON in JSON", string(red.json([]byte(`["{\"t\": \" p@ss w/rd?\\u0026=ü\\u003c\\u003e\\\"\\\\\"}"]`))), `["{\"t\": \"[secret:S]\"}"]`},
		{"JSON a secret breaks", string(red.json([]byte(`{"pin":12345}`))), `"{\"pin\":[secret:PIN]}"`},
		{"JSON without secrets", string(red.json([]byte(`{"a": "\u00fc", "b": 1}`))), `{"a": "\u00fc", "b": 1}`},
		{"head cut in a secret", string(red.head([]byte("abc" + leaky[:5]))), "abc"},
		{"head cut in an encoded secret", string(red.head([]byte("abc" + url.PathEscape(leaky)[:7]))), "abc"},
		{"head whole", string(red.head([]byte("abc" + leaky))), "abc" + leaky},
		{"tail cut in a secret", string(red.tail([]byte(leaky[5:] + "abc"))), "abc"},
		{"tail whole", string(red.tail([]byte("x" + leaky[5:] + "abc"))), "x" + leaky[5:] + "abc"},
		{"no secrets", (*redactor)(nil).text(leaky) + string((*redactor)(nil).json([]byte(`"x"`))) + string((*redactor)(nil).head([]byte("y"))), leaky + `"x"y`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, tt.got)
		})
	}
	require.Nil(t, newRedactor(map[string]string{"EMPTY": ""}), "an empty secret has no form")
}

// reports records what a command reports on its control channel.
type reports struct {
	mu          sync.Mutex
	checkpoints []string
	messages    []string
}

func (r *reports) SaveCheckpoint(_ context.Context, c json.RawMessage) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.checkpoints = append(r.checkpoints, string(c))
	return nil
}

func (r *reports) Progress(_ context.Context, _ float64, msg string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.messages = append(r.messages, msg)
	return nil
}

// TestExecSecretInNoForm: a command given a secret in its environment
// that prints it in any form, on stdout as text or JSON, on stderr, cut
// by the tail an error quotes, or on its control channel (a checkpoint, a
// progress message, a line that is not JSON), has it in none of what the
// step returns or reports.
func TestExecSecretInNoForm(t *testing.T) {
	t.Parallel()
	type scenario struct {
		name   string
		script string
		// suffix: the end of the form must not show either (a cut).
		suffix bool
	}
	for n, f := range leakForms {
		form := f.of(leaky)
		asJSON, err := json.Marshal(map[string]string{"got": form})
		require.NoError(t, err)
		progress, err := json.Marshal(map[string]any{"progress": 0.5, "message": "at " + form})
		require.NoError(t, err)
		checkpoint, err := json.Marshal(map[string]any{"checkpoint": map[string]string{"token": form}})
		require.NoError(t, err)
		for _, sc := range []scenario{
			{name: "stdout", script: `printf 'got %s' "$FORM"`},
			{name: "stdout JSON", script: `printf '%s' '` + string(asJSON) + `'`},
			{name: "stderr", script: `printf 'bad token %s' "$FORM" >&2; exit 3`},
			{name: "stderr cut", script: `printf '%s' "$FORM" >&2; head -c ` + strconv.Itoa(execErrorStderr-12) + ` /dev/zero | tr '\0' x >&2; exit 3`, suffix: true},
			{name: "progress", script: `printf '%s\n' '` + string(progress) + `' >&3`},
			{name: "checkpoint", script: `printf '%s\n' '` + string(checkpoint) + `' >&3`},
			{name: "control line", script: `printf 'not JSON %s\n' "$FORM" >&3`},
		} {
			t.Run(fmt.Sprintf("%s %d %s", sc.name, n, f.name), func(t *testing.T) {
				t.Parallel()
				rep := &reports{}
				res, err := Exec(context.Background(), Request{Step: "s", Secrets: leakyLookup, Report: rep,
					Config: shConfig(t, sc.script, map[string]any{"env": map[string]string{"FORM": form, "T": "${secret:S}"}})})
				out := stepOutput(res, err)
				rep.mu.Lock()
				out += "\n" + strings.Join(rep.checkpoints, "\n") + "\n" + strings.Join(rep.messages, "\n")
				rep.mu.Unlock()
				requireNoLeak(t, out)
				if sc.suffix {
					require.NotContains(t, out, form[len(form)-8:], "the end of the secret")
				}
			})
		}
	}
}
