package engine

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/weftrun/weft/internal/event"
	"github.com/weftrun/weft/internal/spans"
	"github.com/weftrun/weft/store"
)

// This file traces the engine's work with OpenTelemetry, after the
// messaging semantic conventions: a submission is a "send" (producer) span,
// each attempt of a step a "process" (consumer) span under its step's span
// (the task's and steps' spans are package spans' Writer's). The traceparent of
// the submission is stored with the task, so that every attempt of every
// step, on any engine and after any crash, continues the submitter's trace.
// With no TracerProvider configured the engine creates no span; a stored
// traceparent still reaches handlers through their context.

// traceContext returns the W3C traceparent and tracestate of the span in
// ctx, "" when ctx carries none.
func traceContext(ctx context.Context) (parent, state string) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return "", ""
	}
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c["traceparent"], c["tracestate"]
}

// withTraceParent returns ctx continuing the trace of a stored traceparent
// and tracestate; ctx itself when tp is empty or not a valid traceparent.
// A tracestate that is not valid is dropped, as the standard says.
func withTraceParent(ctx context.Context, tp, ts string) context.Context {
	sc, ok := spans.ParseTraceContext(tp, ts)
	if !ok {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}

// newTraceParent returns the traceparent of a new trace for a task
// submitted outside any trace: its correlation id in W3C form, which its
// attempts' spans (on engines that trace) and what its steps call continue.
// It is marked sampled, as a root span of the default sampler would be, so
// that engines that trace record the task's attempts; an engine's own
// sampler (OTEL_TRACES_SAMPLER) still decides.
//
// Its span id is spans.Synthetic: no span has it, and the task's span
// (package spans) starts the trace instead of hanging under it.
func newTraceParent() string {
	var tid trace.TraceID
	binary.LittleEndian.PutUint64(tid[:8], rand.Uint64())
	binary.LittleEndian.PutUint64(tid[8:], rand.Uint64())
	if tid[0] == 0 {
		tid[0] = 1 // an all-zero trace id is invalid
	}
	sid := spans.Synthetic(tid)
	return "00-" + hex.EncodeToString(tid[:]) + "-" + hex.EncodeToString(sid[:]) + "-01"
}

// tracer makes the spans of submissions and attempts; with a nil
// trace.Tracer (no TracerProvider configured) it makes none.
type tracer struct{ t trace.Tracer }

// startSubmit starts the span of a submission, when tracing is on.
func (tr tracer) startSubmit(ctx context.Context, subs []Submission) (context.Context, trace.Span) {
	if tr.t == nil {
		return ctx, nil
	}
	name := "send"
	attrs := []attribute.KeyValue{spans.SystemWeft, spans.AttrOpName.String("send"), spans.AttrOpType.String("send")}
	if len(subs) == 1 {
		name += " " + subs[0].Workflow
		attrs = append(attrs, spans.AttrDestination.String(subs[0].Workflow))
	} else {
		attrs = append(attrs, spans.AttrBatchCount.Int(len(subs)))
	}
	return tr.t.Start(ctx, name, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
}

// endSubmit ends the span of a submission.
func endSubmit(span trace.Span, res []SubmitResult, err error) {
	if span == nil {
		return
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		span.SetAttributes(spans.AttrErrorType.String(submitErrorType(err)))
	} else if len(res) == 1 {
		span.SetAttributes(spans.AttrTaskID.Int64(res[0].Task.ID), spans.AttrMessageID.String(strconv.FormatInt(res[0].Task.ID, 10)), spans.AttrDuplicate.Bool(res[0].Duplicate))
	}
	span.End()
}

// attemptContext returns ctx continuing the task's trace for one attempt
// of a claimed step, with the attempt's span when tracing is on (nil
// otherwise). The span starts at the claim, under its step's span (package
// spans), with the id spans.AttemptID, which a remote worker was given at
// the claim (attemptTraceParent).
func (tr tracer) attemptContext(ctx context.Context, c *store.ClaimedStep, workerID string) (context.Context, trace.Span) {
	if tr.t == nil {
		return withTraceParent(ctx, c.TraceParent, c.TraceState), nil
	}
	step, ok := stepSpanContext(c)
	if !ok {
		ctx = withTraceParent(ctx, c.TraceParent, c.TraceState)
	} else {
		ctx = spans.WithID(trace.ContextWithRemoteSpanContext(ctx, step), trace.TraceID{}, spans.AttemptID(step.TraceID(), c.ID, c.Attempts))
	}
	ref := c.Namespace + "/" + c.Workflow
	attrs := []attribute.KeyValue{spans.SystemWeft, spans.AttrOpName.String("process"), spans.AttrOpType.String("process"),
		spans.AttrDestination.String(ref), spans.AttrMessageID.String(strconv.FormatInt(c.ID, 10)), spans.AttrTaskID.Int64(c.TaskID),
		spans.AttrWorkflow.String(ref + "@" + c.Version), spans.AttrStep.String(c.Name), spans.AttrHandler.String(c.Handler), spans.AttrAttempt.Int(c.Attempts)}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer)}
	if c.StartedAt != nil {
		opts = append(opts, trace.WithTimestamp(*c.StartedAt))
		if !c.ReadyAt.IsZero() {
			attrs = append(attrs, spans.AttrQueueWait.Int64(max(0, c.StartedAt.Sub(c.ReadyAt).Milliseconds())))
		}
	}
	if workerID != "" {
		attrs = append(attrs, spans.AttrRemote.String(workerID))
	}
	return tr.t.Start(ctx, "process "+ref+" "+c.Name, append(opts, trace.WithAttributes(attrs...))...)
}

// stepSpanContext is the span context of a claimed step's span: the task's
// trace, the step's span id.
func stepSpanContext(c *store.ClaimedStep) (trace.SpanContext, bool) {
	sc, ok := spans.ParseTraceContext(c.TraceParent, c.TraceState)
	if !ok {
		return sc, false
	}
	return sc.WithSpanID(spans.StepID(sc.TraceID(), c.ID)), true
}

// attemptTraceParent is the traceparent a remote worker gets with a claimed
// step: its attempt's span, which the engine writes when the worker
// reports, so that the worker's own spans nest under it. Without tracing,
// the task's.
func (tr tracer) attemptTraceParent(c *store.ClaimedStep) string {
	step, ok := stepSpanContext(c)
	if tr.t == nil || !ok {
		return c.TraceParent
	}
	sid := spans.AttemptID(step.TraceID(), c.ID, c.Attempts)
	return "00-" + step.TraceID().String() + "-" + sid.String() + "-" + step.TraceFlags().String()
}

// endAttempt ends an attempt's span with its outcome.
func endAttempt(span trace.Span, o store.Outcome, recorded bool) {
	if span == nil {
		return
	}
	name := event.OutcomeInterrupted
	if recorded {
		name = outcomeName(o)
	}
	span.SetAttributes(spans.AttrOutcome.String(name))
	if name == event.OutcomeFailed || name == event.OutcomeRetry {
		// error.type, low in cardinality as the conventions want: failed
		// for good, or failed with a retry to come.
		span.SetAttributes(spans.AttrErrorType.String(name))
		span.SetStatus(codes.Error, o.Error)
	}
	span.End(trace.WithTimestamp(time.Now()))
}

// submitErrorType names why a submission was refused, for error.type.
func submitErrorType(err error) string {
	switch {
	case errors.Is(err, store.ErrInvalid):
		return "invalid"
	case errors.Is(err, store.ErrNotFound):
		return "not_found"
	case errors.Is(err, store.ErrConflict):
		return "conflict"
	case errors.Is(err, store.ErrUnavailable):
		return "unavailable"
	}
	return "_OTHER"
}

// traceID returns the trace id of a stored traceparent; zero when there is
// none.
func traceID(tp string) trace.TraceID {
	sc, _ := spans.ParseTraceParent(tp)
	return sc.TraceID()
}
