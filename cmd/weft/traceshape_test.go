package main

import (
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otlpReceiver is an OTLP/HTTP trace receiver: it decodes what exporters
// send to /v1/traces as a collector does.
type otlpReceiver struct {
	mu    sync.Mutex
	spans []*tracepb.Span
}

func (o *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "want protobuf on /v1/traces", http.StatusUnsupportedMediaType)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var req coltrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	o.mu.Lock()
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			o.spans = append(o.spans, ss.Spans...)
		}
	}
	o.mu.Unlock()
	out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// TestTraceShowsWorkflowShape: weft run of examples/hello.yaml, exporting
// over OTLP to a receiver, gives one trace shaped as the workflow: the
// submission, the task under it, its four steps under the task, and each
// step's attempt under its step.
func TestTraceShowsWorkflowShape(t *testing.T) {
	t.Parallel()
	recv := &otlpReceiver{}
	hs := httptest.NewServer(recv)
	t.Cleanup(hs.Close)
	dir := t.TempDir()
	cfg := writeFile(t, dir, "weft.yaml", "db: "+dir+"/weft.db\ntelemetry:\n  traces_exporter: otlp\n  otlp_endpoint: "+hs.URL+"\n")
	var stdout, stderr syncBuffer
	code := newApp(strings.NewReader(""), &stdout, &stderr, func(string) string { return "" }).
		execute(t.Context(), []string{"--config", cfg, "run", "--json", example("hello.yaml"), "--input", `{"name": "Ada"}`})
	require.Equal(t, 0, code, stderr.String())
	require.NotContains(t, stderr.String(), "export failed")

	recv.mu.Lock()
	defer recv.mu.Unlock()
	byID := map[string]*tracepb.Span{}
	byName := map[string][]*tracepb.Span{}
	for _, s := range recv.spans {
		byID[hex.EncodeToString(s.SpanId)] = s
		byName[s.Name] = append(byName[s.Name], s)
	}
	one := func(name string) *tracepb.Span {
		t.Helper()
		require.Len(t, byName[name], 1, "spans named %q among %d", name, len(recv.spans))
		return byName[name][0]
	}
	parent := func(s *tracepb.Span) *tracepb.Span {
		t.Helper()
		p := byID[hex.EncodeToString(s.ParentSpanId)]
		require.NotNil(t, p, "the parent of %q was exported", s.Name)
		require.Equal(t, s.TraceId, p.TraceId, "%q is in its parent's trace", s.Name)
		return p
	}
	send := one("send examples/hello@1")
	task := one("task examples/hello")
	require.Equal(t, send, parent(task), "the task hangs under its submission")
	for _, step := range []string{"greet", "shout", "count", "report"} {
		st := one("step " + step)
		require.Equal(t, task, parent(st), "step %s hangs under the task", step)
		attempt := one("process examples/hello " + step)
		require.Equal(t, st, parent(attempt), "the attempt of %s hangs under its step", step)
		require.LessOrEqual(t, st.StartTimeUnixNano, attempt.StartTimeUnixNano, "the step began before its attempt")
		require.GreaterOrEqual(t, st.EndTimeUnixNano, attempt.EndTimeUnixNano, "and ended after it")
		require.GreaterOrEqual(t, task.EndTimeUnixNano, st.EndTimeUnixNano)
	}
}
