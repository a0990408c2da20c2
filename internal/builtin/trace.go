package builtin

import (
	"context"
	"net/http"
	"strconv"

	"github.com/weftrun/weft/internal/version"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// traceContext returns the W3C trace context (traceparent and, when set,
// tracestate) of the span in ctx, nil when ctx carries none. The engine
// puts there the step attempt's span, or the submitter's trace when
// tracing is off, so that what a step calls joins the task's trace: exec
// passes it as TRACEPARENT and TRACESTATE, http as the traceparent and
// tracestate headers.
func traceContext(ctx context.Context) propagation.MapCarrier {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c
}

// startClientSpan starts the client span of an http step's request, from
// the provider of the attempt's span in its context, after the HTTP
// semantic conventions, and returns r in the span's context; urlFull is
// the URL as the span may show it. Without a recording span there
// (tracing off) it returns r and that span, which records nothing.
func startClientSpan(r *http.Request, urlFull string) (*http.Request, trace.Span) {
	parent := trace.SpanFromContext(r.Context())
	if !parent.IsRecording() {
		return r, parent
	}
	tracer := version.Tracer(parent.TracerProvider())
	port := r.URL.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[r.URL.Scheme]
	}
	attrs := []attribute.KeyValue{
		attribute.String("http.request.method", r.Method),
		attribute.String("url.full", urlFull),
		attribute.String("server.address", r.URL.Hostname()),
	}
	if n, err := strconv.Atoi(port); err == nil {
		attrs = append(attrs, attribute.Int("server.port", n))
	}
	ctx, span := tracer.Start(r.Context(), r.Method, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	return r.WithContext(ctx), span
}

// endClientSpan records the answer, or the failure to get one, on the
// request's span: a status of 400 or more is an error, as the conventions
// say for client spans. redact keeps secrets out of the failure's message.
func endClientSpan(span trace.Span, resp *http.Response, err error, redact func(string) string) {
	switch {
	case err != nil:
		span.SetAttributes(attribute.String("error.type", "_OTHER"))
		span.SetStatus(codes.Error, redact(err.Error()))
	case resp.StatusCode >= 400:
		span.SetAttributes(attribute.Int("http.response.status_code", resp.StatusCode), attribute.String("error.type", strconv.Itoa(resp.StatusCode)))
		span.SetStatus(codes.Error, "")
	default:
		span.SetAttributes(attribute.Int("http.response.status_code", resp.StatusCode))
	}
}
