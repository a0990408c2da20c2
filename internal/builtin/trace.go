package builtin

import (
	"context"

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
