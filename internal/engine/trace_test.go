package engine

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/weftrun/weft/internal/spans"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

func TestParseTraceParent(t *testing.T) {
	t.Parallel()
	const ok = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, tt := range []struct {
		tp    string
		valid bool
	}{
		{ok, true},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", true},
		{"", false},
		{"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false},
		{"00-00000000000000000000000000000000-00f067aa0ba902b7-01", false},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", false},
		{"00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01", false},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7-01", false},
		{ok + "0", false},
	} {
		sc, valid := spans.ParseTraceParent(tt.tp)
		require.Equal(t, tt.valid, valid, tt.tp)
		if !valid {
			continue
		}
		// It reads as the standard propagator does.
		want := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": tt.tp}))
		require.True(t, want.Equal(sc), tt.tp)
		tp, ts := traceContext(trace.ContextWithSpanContext(context.Background(), sc))
		require.Equal(t, tt.tp, tp)
		require.Empty(t, ts)
	}
	for range 100 {
		_, valid := spans.ParseTraceParent(newTraceParent())
		require.True(t, valid)
	}
}

// TestTraceStateRoundTrip: a tracestate stored with a task is what the
// attempt's context carries; one that is not valid is dropped.
func TestTraceStateRoundTrip(t *testing.T) {
	t.Parallel()
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, tt := range []struct{ stored, want string }{
		{"vendor=abc,other=1", "vendor=abc,other=1"},
		{"", ""},
		{"not a tracestate", ""},
	} {
		ctx := withTraceParent(context.Background(), tp, tt.stored)
		parent, state := traceContext(ctx)
		require.Equal(t, tp, parent)
		require.Equal(t, tt.want, state, "stored %q", tt.stored)
	}
}
