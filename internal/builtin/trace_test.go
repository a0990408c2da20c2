package builtin

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// inTrace returns a context in the trace of traceparent tp.
func inTrace(tp string) context.Context {
	return propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": tp})
}

// TestBuiltinsPassTheTrace: exec steps get the attempt's trace as
// TRACEPARENT, http steps as the traceparent header; with no trace,
// neither is set.
func TestBuiltinsPassTheTrace(t *testing.T) {
	t.Parallel()
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, tt := range []struct {
		name string
		ctx  context.Context
		want string
	}{
		{"in a trace", inTrace(tp), tp},
		{"no trace", context.Background(), ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res, err := Exec(tt.ctx, Request{TaskID: 1, Step: "s", Attempt: 1,
				Config: json.RawMessage(`{"command": ["sh", "-c", "printf '{\"tp\":\"%s\"}' \"$TRACEPARENT\""]}`)})
			require.NoError(t, err)
			require.JSONEq(t, `{"tp":"`+tt.want+`"}`, string(res))

			srv, seen := recordingServer(t, http.StatusOK, nil, `{}`)
			_, err = HTTP(tt.ctx, srv.Client(), Request{TaskID: 1, Step: "s", Attempt: 1, Config: httpCfg(t, map[string]any{"url": srv.URL})})
			require.NoError(t, err)
			require.Equal(t, tt.want, (<-seen).header.Get("traceparent"))
		})
	}
}

// TestHTTPClientSpan: under a traced attempt an http step's request is a
// client span, child of the attempt's, whose context the callee receives
// (traceparent and tracestate); a 5xx answer makes it an error with
// error.type the status code.
func TestHTTPClientSpan(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		status  int
		errType string
	}{
		{http.StatusOK, ""},
		{http.StatusServiceUnavailable, "503"},
	} {
		t.Run(strconv.Itoa(tt.status), func(t *testing.T) {
			t.Parallel()
			exp := tracetest.NewInMemoryExporter()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
			t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
			ts, err := trace.ParseTraceState("vendor=abc")
			require.NoError(t, err)
			parentCtx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
				TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled, TraceState: ts, Remote: true}))
			ctx, attempt := tp.Tracer("test").Start(parentCtx, "process")
			srv, seen := recordingServer(t, tt.status, nil, `{}`)
			_, _ = HTTP(ctx, srv.Client(), Request{TaskID: 1, Step: "s", Attempt: 1, Secrets: lookup,
				Config: httpCfg(t, map[string]any{"url": srv.URL + "/hook/${secret:TOKEN}?token=x"})})
			attempt.End()

			got := <-seen
			var client tracetest.SpanStub
			for _, sp := range exp.GetSpans() {
				if sp.SpanKind == trace.SpanKindClient {
					client = sp
				}
			}
			require.Equal(t, "GET", client.Name)
			require.Equal(t, attempt.SpanContext().SpanID(), client.Parent.SpanID(), "a child of the attempt's span")
			require.Equal(t, "00-"+client.SpanContext.TraceID().String()+"-"+client.SpanContext.SpanID().String()+"-01", got.header.Get("traceparent"),
				"the callee continues the client span")
			require.Equal(t, "vendor=abc", got.header.Get("tracestate"))
			attrs := map[string]string{}
			for _, kv := range client.Attributes {
				attrs[string(kv.Key)] = kv.Value.String()
			}
			require.Equal(t, "GET", attrs["http.request.method"])
			require.Equal(t, strconv.Itoa(tt.status), attrs["http.response.status_code"])
			require.NotContains(t, attrs["url.full"], "token=x", "the query is left out")
			require.True(t, strings.HasSuffix(attrs["url.full"], "/hook/[secret:TOKEN]"), "a secret is shown by its name: %s", attrs["url.full"])
			require.Equal(t, tt.errType, attrs["error.type"])
			if tt.errType != "" {
				require.Equal(t, codes.Error, client.Status.Code)
			}
		})
	}
}
