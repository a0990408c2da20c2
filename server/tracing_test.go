package server_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/server"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/wire"
)

// TestRemoteAttemptSpanIsTheWorkersParent: a remote worker is handed, with
// its claim, the traceparent of its attempt's span, which the server
// writes when the worker reports, under the step's span, under the task's:
// the worker's own spans nest under its attempt.
func TestRemoteAttemptSpanIsTheWorkersParent(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		exp := tracetest.NewInMemoryExporter()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithIDGenerator(weft.SpanIDs{}))
		t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		en := newEnvWith(t, open(t), server.Options{MaxPoll: 20 * time.Second}, func(c *weft.Config) {
			c.TracerProvider, c.LeaseTTL = tp, time.Minute
		})
		en.register(mixedTemplate)
		w := en.worker(t, "py.enrich")
		var task wire.Task
		en.ok(201, "POST", "/v1/tasks", map[string]any{"workflow": "demo/mixed", "input": map[string]int{"n": 3}}, &task)
		r := w.post("/claim", map[string]any{"handlers": []string{"py.enrich"}, "max": 1, "wait_ms": 15000})
		require.Equal(t, 200, r.status, "%s", r.body)
		var cr wire.ClaimResponse
		r.json(t, &cr)
		require.Len(t, cr.Steps, 1)
		got := cr.Steps[0]
		r = w.post("/complete", map[string]any{"fence": got.Fence, "result": map[string]int{"n": 30}})
		require.Equal(t, 200, r.status, "%s", r.body)
		require.Equal(t, state.TaskCompleted, en.waitTask(task.ID).State)

		// The task's span is written by the leader once the task ended.
		var spans map[string]tracetest.SpanStub
		deadline := time.Now().Add(15 * time.Second)
		for {
			spans = map[string]tracetest.SpanStub{}
			for _, s := range exp.GetSpans() {
				spans[s.Name] = s
			}
			if _, ok := spans["task demo/mixed"]; ok || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		attempt, ok := spans["process demo/mixed enrich"]
		require.True(t, ok, "the attempt's span was written")
		require.Equal(t, "00-"+attempt.SpanContext.TraceID().String()+"-"+attempt.SpanContext.SpanID().String()+"-01", got.TraceParent,
			"the worker was handed its attempt's span")
		step, ok := spans["step enrich"]
		require.True(t, ok, "the step's span was written")
		require.Equal(t, step.SpanContext.SpanID(), attempt.Parent.SpanID(), "the attempt hangs under its step")
		taskSpan := spans["task demo/mixed"]
		require.Equal(t, taskSpan.SpanContext.SpanID(), step.Parent.SpanID(), "the step hangs under the task")
		require.Equal(t, trace.SpanKindConsumer, attempt.SpanKind)
	})
}
