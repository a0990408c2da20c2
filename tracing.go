package weft

import (
	"context"

	"go.opentelemetry.io/otel/trace"

	"github.com/weftrun/weft/internal/spans"
)

// SpanIDs is the OpenTelemetry SDK id generator that gives a workflow's
// trace its shape. Build the TracerProvider of Config.TracerProvider with
// it:
//
//	tp := sdktrace.NewTracerProvider(sdktrace.WithIDGenerator(weft.SpanIDs{}), ...)
//
// A task's span, its steps' spans and their attempts' spans are then
// joined by id across engines and crashes: task → step → attempt. The span
// ids of a task, its steps and their attempts are derived from the task's
// trace; the task's and steps' spans are written when the task ends (by
// the maintenance leader), each attempt's where it ran. Any other span
// gets random ids, as from the SDK's default generator. With another
// generator the engine writes attempts' spans only, under the submitter's
// span, and logs once that task and step spans are off.
type SpanIDs struct{}

// NewIDs returns the trace and span id of a span without a parent.
func (SpanIDs) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	return spans.Generator{}.NewIDs(ctx)
}

// NewSpanID returns the span id of a span with a parent.
func (SpanIDs) NewSpanID(ctx context.Context, tid trace.TraceID) trace.SpanID {
	return spans.Generator{}.NewSpanID(ctx, tid)
}
