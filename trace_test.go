package weft_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/workflow"
)

// tracer returns a provider that keeps its spans in memory, as the
// provider of one process.
func tracer(t *testing.T) (*sdktrace.TracerProvider, *tracetest.InMemoryExporter) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, exp
}

func attr(s tracetest.SpanStub, key string) (string, bool) {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value.String(), true
		}
	}
	return "", false
}

// TestOneTracePerTask: a task submitted inside the caller's span is one
// trace, whichever engine runs its steps and after an engine is declared
// dead mid-step: the submission's span, every attempt's span (the one cut
// off included) and what the handlers see all share the caller's trace id.
func TestOneTracePerTask(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		ctx := context.Background()
		s := open(t)
		tpA, spansA := tracer(t)
		tpB, spansB := tracer(t)
		caller, _ := tracer(t)

		a := newEngine(t, s, weft.Config{ID: "a", TracerProvider: tpA, HeartbeatInterval: 20 * time.Millisecond, LeaseTTL: time.Hour})
		b := newEngine(t, s, weft.Config{ID: "b", TracerProvider: tpB})
		started := make(chan struct{})
		seen := make(chan trace.SpanContext, 4)
		a.Handle("first", func(ctx context.Context, at *weft.Attempt) (any, error) {
			seen <- trace.SpanContextFromContext(ctx)
			if at.Number == 1 {
				close(started)
				<-ctx.Done() // cut off: the engine is declared dead
				return nil, ctx.Err()
			}
			return "ok", nil
		})
		b.Handle("second", func(ctx context.Context, at *weft.Attempt) (any, error) {
			seen <- trace.SpanContextFromContext(ctx)
			return "ok", nil
		})
		w := workflow.New("test", "traced", "1").Step("s1", "first").Step("s2", "second", workflow.DependsOn("s1"))
		register(t, a, w)
		register(t, b, w)
		start(t, a)
		start(t, b)

		callerCtx, root := caller.Tracer("test").Start(ctx, "caller")
		res, err := a.Submit(callerCtx, weft.Submission{Workflow: "test/traced"})
		root.End()
		require.NoError(t, err)
		traceID := root.SpanContext().TraceID()

		<-started
		// Another engine's reaper declares a dead: its attempt is cut off,
		// the step returns to the queue.
		_, err = s.Reap(ctx, time.Now(), time.Now().Add(-time.Hour), []string{"a"}, "b")
		require.NoError(t, err)
		task := wait(t, b, res.Task.ID)
		require.Equal(t, state.TaskCompleted, task.State)

		var attempts []tracetest.SpanStub
		var sends int
		for _, sp := range append(spansA.GetSpans(), spansB.GetSpans()...) {
			taskID, _ := attr(sp, "weft.task.id")
			if taskID != jsonInt(res.Task.ID) {
				continue
			}
			require.Equal(t, traceID, sp.SpanContext.TraceID(), "span %q is in the task's trace", sp.Name)
			system, _ := attr(sp, "messaging.system")
			require.Equal(t, "weft", system)
			// The conventions' types: the message id is a string; the
			// instrumentation scope has weft's version.
			for _, kv := range sp.Attributes {
				if kv.Key == "messaging.message.id" {
					require.Equal(t, attribute.STRING, kv.Value.Type(), "span %q", sp.Name)
				}
			}
			require.Equal(t, weft.Version, sp.InstrumentationScope.Version, "span %q", sp.Name)
			switch sp.SpanKind {
			case trace.SpanKindProducer:
				sends++
				require.Equal(t, root.SpanContext().SpanID(), sp.Parent.SpanID(), "the submission is a child of the caller's span")
			case trace.SpanKindConsumer:
				attempts = append(attempts, sp)
			}
		}
		require.Equal(t, 1, sends)
		outcomes := map[string]string{}
		for _, sp := range attempts {
			step, _ := attr(sp, "weft.step")
			attempt, _ := attr(sp, "weft.attempt")
			outcome, _ := attr(sp, "weft.outcome")
			_, hasWait := attr(sp, "weft.queue_wait_ms")
			require.True(t, hasWait, "span %q has the queue wait", sp.Name)
			outcomes[step+"#"+attempt] = outcome
		}
		require.Equal(t, map[string]string{"s1#1": "interrupted", "s1#2": "completed", "s2#1": "completed"}, outcomes)
		require.Len(t, spansB.GetSpans(), 1, "b ran s2")

		// Handlers see their attempt's span, in the task's trace.
		close(seen)
		n := 0
		for sc := range seen {
			require.Equal(t, traceID, sc.TraceID())
			n++
		}
		require.Equal(t, 3, n)
	})
}

func jsonInt(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// TestTraceWithoutTracing: an engine with no tracer provider makes no span,
// but a task submitted in a caller's trace still hands that trace to its
// handlers.
func TestTraceWithoutTracing(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		s := open(t)
		e := newEngine(t, s, weft.Config{})
		seen := make(chan trace.SpanContext, 1)
		e.Handle("h", func(ctx context.Context, at *weft.Attempt) (any, error) {
			seen <- trace.SpanContextFromContext(ctx)
			return nil, nil
		})
		register(t, e, workflow.New("test", "plain", "1").Step("s", "h"))
		start(t, e)
		caller, _ := tracer(t)
		state, err := trace.ParseTraceState("vendor=abc")
		require.NoError(t, err)
		ctx, root := caller.Tracer("test").Start(context.Background(), "caller")
		ctx = trace.ContextWithSpanContext(ctx, root.SpanContext().WithTraceState(state))
		res, err := e.Submit(ctx, weft.Submission{Workflow: "test/plain"})
		root.End()
		require.NoError(t, err)
		wait(t, e, res.Task.ID)
		sc := <-seen
		require.Equal(t, root.SpanContext().TraceID(), sc.TraceID())
		require.Equal(t, root.SpanContext().SpanID(), sc.SpanID(), "the stored traceparent is the caller's span")
		require.Equal(t, "vendor=abc", sc.TraceState().String(), "and its tracestate")
	})
}

// TestFailedSpansHaveErrorType: an attempt that fails carries error.type
// (failed for good, or retry when another attempt follows) with an error
// status, and so does a refused submission (not_found for an unknown
// workflow, invalid for a bad one).
func TestFailedSpansHaveErrorType(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tp, spans := tracer(t)
	e := newEngine(t, backends()["sqlite"](t), weft.Config{TracerProvider: tp})
	e.Handle("boom", func(ctx context.Context, at *weft.Attempt) (any, error) {
		if at.Number == 1 {
			return nil, errors.New("try again")
		}
		return nil, weft.Permanent(errors.New("no"))
	})
	register(t, e, workflow.New("test", "fails", "1").Step("s", "boom", workflow.WithRetry(workflow.RetryPolicy{MaxAttempts: 3, Backoff: "fixed", Initial: workflow.Duration(time.Millisecond)})))
	start(t, e)
	res, err := e.Submit(ctx, weft.Submission{Workflow: "test/fails"})
	require.NoError(t, err)
	require.Equal(t, state.TaskFailed, wait(t, e, res.Task.ID).State)
	_, err = e.Submit(ctx, weft.Submission{Workflow: "test/missing"})
	require.ErrorIs(t, err, weft.ErrNotFound)
	_, err = e.Submit(ctx, weft.Submission{Workflow: "test/fails", Priority: 1 << 30})
	require.ErrorIs(t, err, weft.ErrInvalid)

	got := map[string]string{}
	for _, sp := range spans.GetSpans() {
		errType, ok := attr(sp, "error.type")
		if !ok {
			require.NotEqual(t, codes.Error, sp.Status.Code, "span %q has an error status without error.type", sp.Name)
			continue
		}
		require.Equal(t, codes.Error, sp.Status.Code, "span %q", sp.Name)
		attempt, _ := attr(sp, "weft.attempt")
		got[sp.Name+"#"+attempt] = errType
	}
	require.Equal(t, map[string]string{
		"process test/fails s#1": "retry",
		"process test/fails s#2": "failed",
		"send test/missing#":     "not_found",
		"send test/fails#":       "invalid",
	}, got)
}

// TestTaskAndStepSpans: with weft's span ids, a task's trace has the task's
// span under the submission, a span per step under it, each attempt under
// its step, and the waits between attempts and for a signal as events of
// their step's span, on both stores.
func TestTaskAndStepSpans(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		ctx := context.Background()
		exp := tracetest.NewInMemoryExporter()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithIDGenerator(weft.SpanIDs{}))
		t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		e := newEngine(t, open(t), weft.Config{TracerProvider: tp})
		e.Handle("flaky", func(ctx context.Context, at *weft.Attempt) (any, error) {
			if at.Number == 1 {
				return nil, errors.New("try again")
			}
			return "ok", nil
		})
		register(t, e, workflow.New("test", "shape", "1").
			Step("flaky", "flaky", workflow.WithRetry(workflow.RetryPolicy{MaxAttempts: 3, Backoff: "fixed", Initial: workflow.Duration(time.Millisecond)})).
			Step("approve", "", workflow.DependsOn("flaky"), workflow.AwaitSignal("approve", 0)))
		start(t, e)
		res, err := e.Submit(ctx, weft.Submission{Workflow: "test/shape"})
		require.NoError(t, err)
		eventually(t, "the signal step waits", func() bool {
			task, err := e.Get(ctx, res.Task.ID)
			require.NoError(t, err)
			return stepByName(t, task, "approve").State == state.StepWaiting
		})
		_, err = e.Signal(ctx, res.Task.ID, "approve", nil)
		require.NoError(t, err)
		require.Equal(t, state.TaskCompleted, wait(t, e, res.Task.ID).State)

		byName := map[string][]tracetest.SpanStub{}
		eventually(t, "the task's span is written", func() bool {
			byName = map[string][]tracetest.SpanStub{}
			for _, s := range exp.GetSpans() {
				byName[s.Name] = append(byName[s.Name], s)
			}
			return len(byName["task test/shape"]) == 1
		})
		send, task := byName["send test/shape"], byName["task test/shape"][0]
		require.Len(t, send, 1)
		require.Equal(t, send[0].SpanContext.SpanID(), task.Parent.SpanID(), "the task hangs under its submission")
		events := func(s tracetest.SpanStub) []string {
			var out []string
			for _, ev := range s.Events {
				out = append(out, ev.Name)
			}
			return out
		}
		for _, name := range []string{"flaky", "approve"} {
			require.Len(t, byName["step "+name], 1, name)
			step := byName["step "+name][0]
			require.Equal(t, task.SpanContext.SpanID(), step.Parent.SpanID(), "step %s hangs under the task", name)
		}
		// The retry waits out its backoff, or is ready at once when the
		// backoff passed before its outcome was written.
		require.Len(t, events(byName["step flaky"][0]), 1)
		require.Contains(t, []string{"step.waiting", "step.retried"}, events(byName["step flaky"][0])[0])
		require.Equal(t, []string{"step.waiting"}, events(byName["step approve"][0]), "the signal step waited")
		flaky := byName["step flaky"][0]
		attempts := byName["process test/shape flaky"]
		require.Len(t, attempts, 2)
		for _, a := range attempts {
			require.Equal(t, flaky.SpanContext.SpanID(), a.Parent.SpanID(), "each attempt hangs under its step")
		}
	})
}
