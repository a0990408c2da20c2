// Package spans gives a workflow's trace its shape: a span for the task,
// one for each step under it, and each attempt of a step under its step.
//
// A task can run for days, on many engines, across crashes, so no process
// holds its span open. Instead the span ids of a task, its steps and their
// attempts are derived from the task's trace id and their own ids (TaskID,
// StepID, AttemptID): any engine, at any time, names the same parent. An
// attempt's span is made where the attempt runs, as a child of its step's
// id; the task's and steps' spans are written once the task has ended, by
// the maintenance leader from the history (Writer), with their real start
// and end times and the waits (retry backoffs, snoozes, signals, timers)
// and preemptions as events. A tracing backend joins them by id.
//
// Spans get the ids asked for only from a TracerProvider whose id
// generator is Generator (sdktrace.WithIDGenerator(spans.Generator{})); the
// weft CLI sets it up so, and weft.SpanIDGenerator returns it for
// applications.
package spans

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"hash/fnv"

	"go.opentelemetry.io/otel/trace"
)

// derive hashes a trace id, a kind and numbers into a span id that is never
// zero.
func derive(tid trace.TraceID, kind byte, nums ...int64) trace.SpanID {
	h := fnv.New64a()
	_, _ = h.Write(tid[:])
	_, _ = h.Write([]byte{kind})
	var b [8]byte
	for _, n := range nums {
		binary.BigEndian.PutUint64(b[:], uint64(n))
		_, _ = h.Write(b[:])
	}
	var sid trace.SpanID
	binary.BigEndian.PutUint64(sid[:], h.Sum64()|1)
	return sid
}

// TaskID is the span id of a task's span.
func TaskID(tid trace.TraceID, taskID int64) trace.SpanID { return derive(tid, 't', taskID) }

// StepID is the span id of a step's span.
func StepID(tid trace.TraceID, stepID int64) trace.SpanID { return derive(tid, 's', stepID) }

// AttemptID is the span id of a step's attempt's span.
func AttemptID(tid trace.TraceID, stepID int64, attempt int) trace.SpanID {
	return derive(tid, 'a', stepID, int64(attempt))
}

// Synthetic is the span id weft puts in the traceparent of a task submitted
// outside any trace: no span has it, so a task span whose parent it is
// starts the trace instead.
func Synthetic(tid trace.TraceID) trace.SpanID { return derive(tid, 'r') }

type wantKey struct{}

type want struct {
	tid trace.TraceID // zero: the parent's
	sid trace.SpanID
}

// WithID returns ctx asking the next span started with it for span id sid
// and, when tid is valid and the span has no parent, trace id tid.
func WithID(ctx context.Context, tid trace.TraceID, sid trace.SpanID) context.Context {
	return context.WithValue(ctx, wantKey{}, want{tid: tid, sid: sid})
}

// Generator is an OpenTelemetry SDK id generator
// (sdktrace.WithIDGenerator) that gives a span the ids its context asks for
// (WithID), and random ones otherwise.
type Generator struct{}

// NewIDs returns the trace and span id of a span without a parent.
func (Generator) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	w, _ := ctx.Value(wantKey{}).(want)
	tid, sid := w.tid, w.sid
	if !tid.IsValid() {
		_, _ = rand.Read(tid[:])
	}
	if !sid.IsValid() {
		sid = randomSpanID()
	}
	return tid, sid
}

// NewSpanID returns the span id of a span with a parent.
func (Generator) NewSpanID(ctx context.Context, _ trace.TraceID) trace.SpanID {
	if w, ok := ctx.Value(wantKey{}).(want); ok && w.sid.IsValid() {
		return w.sid
	}
	return randomSpanID()
}

func randomSpanID() trace.SpanID {
	var sid trace.SpanID
	for !sid.IsValid() {
		_, _ = rand.Read(sid[:])
	}
	return sid
}

// ParseTraceParent reads a version 00 W3C traceparent, as stored with a
// task ("00-<32 hex>-<16 hex>-<2 hex>"), without the allocations of the
// propagator: every attempt of a task reads it.
func ParseTraceParent(tp string) (trace.SpanContext, bool) {
	if len(tp) != 55 || tp[0:3] != "00-" || tp[35] != '-' || tp[52] != '-' {
		return trace.SpanContext{}, false
	}
	var tid trace.TraceID
	var sid trace.SpanID
	var flags [1]byte
	if _, err := hex.Decode(tid[:], []byte(tp[3:35])); err != nil {
		return trace.SpanContext{}, false
	}
	if _, err := hex.Decode(sid[:], []byte(tp[36:52])); err != nil {
		return trace.SpanContext{}, false
	}
	if _, err := hex.Decode(flags[:], []byte(tp[53:55])); err != nil {
		return trace.SpanContext{}, false
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.TraceFlags(flags[0]) & trace.FlagsSampled, Remote: true})
	return sc, sc.IsValid()
}

// ParseTraceContext reads a stored trace context: ParseTraceParent's, with
// the tracestate ts when it is valid (one that is not is dropped, as the
// standard says).
func ParseTraceContext(tp, ts string) (trace.SpanContext, bool) {
	sc, ok := ParseTraceParent(tp)
	if ok && ts != "" {
		if st, err := trace.ParseTraceState(ts); err == nil {
			sc = sc.WithTraceState(st)
		}
	}
	return sc, ok
}
