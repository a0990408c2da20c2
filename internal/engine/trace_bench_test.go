package engine

import (
	"context"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/weftrun/weft/internal/version"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// BenchmarkAttemptTracing measures what tracing adds to one attempt, the
// store aside: the attempt's context and span from the stored traceparent,
// and its end. "off" has no tracer provider and a task with no stored
// trace, "off-stored" one with a stored traceparent (what every task
// submitted since traces are stored has), "on" samples every attempt into a
// batching exporter that drops the spans.
func BenchmarkAttemptTracing(b *testing.B) {
	now := time.Now()
	c := store.ClaimedStep{Step: store.Step{ID: 7, TaskID: 3, Name: "charge", Handler: "shop.charge", Namespace: "shop", Attempts: 1, StartedAt: &now},
		Workflow: "checkout", Version: "1", ReadyAt: now.Add(-time.Millisecond)}
	o := store.Outcome{State: state.StepCompleted}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	for _, bb := range []struct {
		name   string
		engine *Engine
		parent string
	}{
		{"off", &Engine{}, ""},
		{"off-stored", &Engine{}, newTraceParent()},
		{"on", &Engine{tracer: tracer{version.Tracer(tp)}}, newTraceParent()},
	} {
		b.Run(bb.name, func(b *testing.B) {
			c := c
			c.TraceParent = bb.parent
			b.ReportAllocs()
			for b.Loop() {
				ctx, span := bb.engine.tracer.attemptContext(context.Background(), &c, "")
				_ = ctx
				endAttempt(span, o, true)
			}
		})
	}
}
