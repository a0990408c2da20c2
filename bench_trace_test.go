package weft_test

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/weftrun/weft"
)

// BenchmarkTracingCost is BenchmarkOneStepThroughput with tracing off (no
// TracerProvider), off for tasks submitted in a caller's trace (the stored
// traceparent still reaches every handler), and on: every submission and
// attempt sampled, batched to an exporter that drops them (the cost of
// making spans, not of shipping them).
func BenchmarkTracingCost(b *testing.B) {
	caller := sdktrace.NewTracerProvider()
	traced, span := caller.Tracer("bench").Start(context.Background(), "caller")
	defer span.End()
	on := func() weft.Config {
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
		b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		return weft.Config{Concurrency: 64, TracerProvider: tp}
	}
	for _, tt := range []struct {
		name string
		ctx  context.Context
		cfg  func() weft.Config
	}{
		{"off", context.Background(), func() weft.Config { return weft.Config{Concurrency: 64} }},
		{"off-in-caller-trace", traced, func() weft.Config { return weft.Config{Concurrency: 64} }},
		{"on", context.Background(), on},
	} {
		b.Run(tt.name, func(b *testing.B) {
			eachBackendBench(b, func(b *testing.B, open storeFactory) {
				burnDown(tt.ctx, b, open, tt.cfg())
			})
		})
	}
}
