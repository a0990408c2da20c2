package spans

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/weftrun/weft/internal/jitter"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// Store is what a Writer reads: the history, to see tasks end, and each
// ended task with its audit trail.
type Store interface {
	History(ctx context.Context, q store.HistoryQuery) ([]store.HistoryEvent, error)
	HistoryEnd(ctx context.Context) (string, error)
	GetTask(ctx context.Context, id int64) (*store.Task, error)
	Audit(ctx context.Context, taskID int64) ([]store.AuditEntry, error)
}

// historyBatch is how many history events a round reads at a time.
const historyBatch = 500

// Writer writes the span of each task that ends, and the spans of its
// steps, while its engine leads maintenance: one engine of a database
// writes them, once. It follows the history from where it stood when it
// started or last became the leader; a task that ends while the lead
// changes hands may get no task span (its attempts' spans are still
// written where they ran).
type Writer struct {
	store  Store
	tracer trace.Tracer
	log    *slog.Logger
	poll   time.Duration

	leading atomic.Bool
	// stale: the cursor is not where the history stood when this engine
	// began to lead, set while another engine leads.
	stale  atomic.Bool
	cursor string
}

// NewWriter returns a Writer that writes with tracer; nil makes one that
// does nothing.
func NewWriter(s Store, tracer trace.Tracer, log *slog.Logger, poll time.Duration) *Writer {
	return &Writer{store: s, tracer: tracer, log: log, poll: poll}
}

// Lead records whether this engine holds the maintenance lease.
func (w *Writer) Lead(leader bool) {
	w.leading.Store(leader)
	if !leader {
		w.stale.Store(true)
	}
}

// Start reads where the history stands: the tasks that end from then on
// get their spans. Call it before the engine runs anything.
func (w *Writer) Start(ctx context.Context) error {
	if w.tracer == nil {
		return nil
	}
	end, err := w.store.HistoryEnd(ctx)
	if err != nil {
		return err
	}
	w.cursor = end
	return nil
}

// Run writes spans while this engine leads, until ctx ends, and then once
// more for what ended last (an engine that stops right after its task, as
// weft run does).
func (w *Writer) Run(ctx context.Context) {
	if w.tracer == nil {
		return
	}
	timer := time.NewTimer(jitter.Of(w.poll))
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			if w.leading.Load() && !w.stale.Load() {
				final, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
				w.round(final)
				cancel()
			}
			return
		case <-timer.C:
		}
		if w.tracer == nil {
			return
		}
		if w.leading.Load() {
			if w.stale.Swap(false) {
				end, err := w.store.HistoryEnd(ctx)
				if err != nil {
					w.stale.Store(true)
					w.log.Warn("task spans: read the history's end", "error", err)
					timer.Reset(jitter.Of(w.poll))
					continue
				}
				w.cursor = end
			}
			w.round(ctx)
		}
		timer.Reset(jitter.Of(w.poll))
	}
}

// round writes the spans of the tasks that ended since the cursor.
func (w *Writer) round(ctx context.Context) {
	for w.tracer != nil {
		events, err := w.store.History(ctx, store.HistoryQuery{After: w.cursor, Limit: historyBatch})
		if err != nil {
			if ctx.Err() == nil {
				w.log.Warn("task spans: read the history", "error", err)
			}
			return
		}
		for _, ev := range events {
			switch ev.Type {
			case "task.completed", "task.failed", "task.cancelled", "task.expired":
				err := w.write(ctx, ev.TaskID)
				switch {
				case errors.Is(err, errWrongGenerator):
					// Said once; the attempts' spans go on.
					w.log.Warn("task spans: off", "error", err)
					w.tracer = nil
					return
				case err != nil && !errors.Is(err, store.ErrNotFound):
					if ctx.Err() != nil {
						return
					}
					w.log.Warn("task spans: write", "task_id", ev.TaskID, "error", err)
				}
			}
			w.cursor = ev.Cursor
		}
		if len(events) < historyBatch {
			return
		}
	}
}

// write writes a task's span and its steps'.
func (w *Writer) write(ctx context.Context, taskID int64) error {
	t, err := w.store.GetTask(ctx, taskID)
	if err != nil {
		return err
	}
	tid, parent, ok := traceOf(t.TraceParent, t.TraceState)
	if !ok {
		return nil
	}
	audit, err := w.store.Audit(ctx, taskID)
	if err != nil {
		return err
	}
	end := t.CreatedAt
	if t.FinishedAt != nil {
		end = *t.FinishedAt
	}
	ref := t.Namespace + "/" + t.Workflow
	// The task's span: under the submitter's span, or the root of a trace
	// weft started for it.
	tctx := WithID(ctx, tid, TaskID(tid, t.ID))
	if parent.IsValid() {
		tctx = trace.ContextWithRemoteSpanContext(tctx, parent)
	}
	_, task := w.tracer.Start(tctx, "task "+ref, trace.WithTimestamp(t.CreatedAt), trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(AttrTaskID.Int64(t.ID), AttrWorkflow.String(ref+"@"+t.Version), AttrState.String(string(t.State))))
	if got := task.SpanContext().SpanID(); got != TaskID(tid, t.ID) && task.IsRecording() {
		// The provider does not take the ids asked for: the steps'
		// spans would hang under nothing. The span is left unended, so
		// it is never exported.
		return errWrongGenerator
	}
	byStep := map[string][]store.AuditEntry{}
	for _, a := range audit {
		if a.Step == "" {
			if store.EventType("", a.From, a.To) == "task.retried" {
				task.AddEvent("task.retried", trace.WithTimestamp(a.At), trace.WithAttributes(AttrReason.String(a.Reason)))
			}
			continue
		}
		byStep[a.Step] = append(byStep[a.Step], a)
	}
	sctx := trace.ContextWithSpanContext(ctx, task.SpanContext())
	for _, s := range t.Steps {
		w.writeStep(sctx, tid, t, s, byStep[s.Name], end)
	}
	ended(task, string(t.State), t.Error, end)
	return nil
}

var errWrongGenerator = errors.New("the TracerProvider does not use weft's span id generator (spans.Generator): no task and step spans")

// writeStep writes one step's span: from when it first left pending to
// when it ended, with its waits and preemptions as events.
func (w *Writer) writeStep(ctx context.Context, tid trace.TraceID, t *store.Task, s store.Step, audit []store.AuditEntry, taskEnd time.Time) {
	start, end := t.CreatedAt, taskEnd
	for _, a := range audit {
		if a.To != string(state.StepPending) {
			start = a.At
			break
		}
	}
	if s.FinishedAt != nil {
		end = *s.FinishedAt
	}
	attrs := []attribute.KeyValue{AttrStep.String(s.Name), AttrAttempts.Int(s.Attempts), AttrState.String(string(s.State))}
	if s.Handler != "" {
		attrs = append(attrs, AttrHandler.String(s.Handler))
	}
	if s.Kind != "" {
		attrs = append(attrs, AttrStepKind.String(s.Kind))
	}
	_, span := w.tracer.Start(WithID(ctx, trace.TraceID{}, StepID(tid, s.ID)), "step "+s.Name, trace.WithTimestamp(start),
		trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
	for _, a := range audit {
		// A retry's backoff, a snooze, a signal or a timer (the reason says
		// which), a retry at once, a preemption, an operator's resolution.
		name := store.EventType(a.Step, a.From, a.To)
		switch {
		case store.Preempted(a):
			name = "step.preempted"
		case a.From == string(state.StepRunning) && a.To == string(state.StepReady):
			name = "step.retried" // a retry whose backoff had passed already
		}
		switch name {
		case "step.waiting", "step.retried", "step.preempted", "step.resolved":
			span.AddEvent(name, trace.WithTimestamp(a.At), trace.WithAttributes(AttrAttempt.Int(a.Attempt), AttrReason.String(a.Reason)))
		}
	}
	ended(span, string(s.State), s.Error, end)
}

// ended ends a task's or step's span with its final state.
func ended(span trace.Span, st, msg string, at time.Time) {
	switch st {
	case string(state.TaskFailed), string(state.TaskExpired):
		span.SetAttributes(AttrErrorType.String(st))
		span.SetStatus(codes.Error, msg)
	}
	span.End(trace.WithTimestamp(at))
}

// traceOf reads a stored traceparent: its trace id, and the span the
// task's span goes under (none when weft started the trace, Synthetic).
func traceOf(tp, ts string) (trace.TraceID, trace.SpanContext, bool) {
	sc, ok := ParseTraceContext(tp, ts)
	switch {
	case !ok:
		return trace.TraceID{}, trace.SpanContext{}, false
	case sc.SpanID() == Synthetic(sc.TraceID()):
		return sc.TraceID(), trace.SpanContext{}, true
	}
	return sc.TraceID(), sc, true
}
