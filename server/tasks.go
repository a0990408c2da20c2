package server

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/wire"
	"github.com/weftrun/weft/workflow"
	"go.opentelemetry.io/otel/propagation"
)

func (s *Server) createTask(r *http.Request) (int, any, error) {
	var req wire.SubmitRequest
	if err := decode(r, &req); err != nil {
		return 0, nil, err
	}
	sub, err := submission(req, "")
	if err != nil {
		return 0, nil, err
	}
	if err := checkScope(r, "workflow", targetNamespace(sub.Workflow)); err != nil {
		return 0, nil, err
	}
	res, err := s.submit(r, []weft.Submission{sub})
	if err != nil {
		return 0, nil, err
	}
	status := http.StatusCreated
	if res[0].Duplicate {
		status = http.StatusOK
	}
	return status, submitted(res[0]), nil
}

// submitBatch submits up to wire.MaxBatch tasks in one transaction: all of
// them or none. A refused task is named by its index: tasks[2].priority.
func (s *Server) submitBatch(r *http.Request) (int, any, error) {
	var req wire.SubmitBatch
	if err := decode(r, &req); err != nil {
		return 0, nil, err
	}
	if len(req.Tasks) == 0 || len(req.Tasks) > wire.MaxBatch {
		return 0, nil, fieldError("tasks", "must hold 1 to %d tasks, got %d", wire.MaxBatch, len(req.Tasks))
	}
	subs := make([]weft.Submission, len(req.Tasks))
	for i, t := range req.Tasks {
		var err error
		if subs[i], err = submission(t, "tasks["+strconv.Itoa(i)+"]."); err != nil {
			return 0, nil, err
		}
		if err := checkScope(r, "tasks["+strconv.Itoa(i)+"].workflow", targetNamespace(subs[i].Workflow)); err != nil {
			return 0, nil, err
		}
	}
	res, err := s.submit(r, subs)
	if se, ok := errors.AsType[*weft.SubmissionError](err); ok {
		if fe, ok := errors.AsType[*store.FieldError](se.Err); ok {
			return 0, nil, inField("tasks["+strconv.Itoa(se.Index)+"]."+fe.Field, err)
		}
	}
	if err != nil {
		return 0, nil, err
	}
	out := wire.SubmittedBatch{Tasks: make([]wire.SubmitResponse, len(res))}
	for i, sr := range res {
		out.Tasks[i] = submitted(sr)
	}
	return http.StatusOK, out, nil
}

func submitted(r weft.SubmitResult) wire.SubmitResponse {
	return wire.SubmitResponse{Task: wire.TaskOf(r.Task), Duplicate: r.Duplicate, Superseded: r.Superseded}
}

// submission checks what the engine does not (the workflow's reference,
// the key's length, a deadline in the past) and makes the request a
// submission. prefix names the request within its body ("tasks[2].").
func submission(req wire.SubmitRequest, prefix string) (weft.Submission, error) {
	if req.Workflow == "" {
		return weft.Submission{}, fieldError(prefix+"workflow", "is required: namespace/name or namespace/name@version")
	}
	if _, _, _, err := workflow.ParseRef(req.Workflow); err != nil {
		return weft.Submission{}, fieldError(prefix+"workflow", "%q is not namespace/name or namespace/name@version", req.Workflow)
	}
	if len(req.IdempotencyKey) > 255 {
		return weft.Submission{}, fieldError(prefix+"idempotency_key", "must be at most 255 bytes")
	}
	sub := weft.Submission{Workflow: req.Workflow, Input: rawJSON(req.Input), Key: req.IdempotencyKey, Priority: req.Priority,
		OnConflict: workflow.OnConflict(req.OnConflict), Tags: req.Tags}
	if req.Input != nil && string(req.Input) == "null" {
		sub.Input = nil
	}
	if req.RunAt != nil {
		sub.RunAt = *req.RunAt
	}
	if req.GoodUntil != nil {
		sub.GoodUntil = *req.GoodUntil
	}
	if !sub.GoodUntil.IsZero() && !sub.GoodUntil.After(time.Now()) {
		return weft.Submission{}, fieldError(prefix+"good_until", "is in the past")
	}
	return sub, nil
}

// submit submits subs in one transaction, under the server's backlog
// limit: a batch that would take the backlog past it is refused whole.
// The tasks continue the caller's trace: a traceparent header (W3C Trace
// Context; one that is not valid is ignored, as the standard says) is
// stored with them.
func (s *Server) submit(r *http.Request, subs []weft.Submission) ([]weft.SubmitResult, error) {
	if n := s.opts.MaxBacklog; n > 0 {
		// Count and submit under one admission slot, or concurrent
		// requests all count below the limit and all submit. A slot in
		// the server rather than a check inside the insert transaction:
		// the limit is this server's admission control, and the store's
		// submit path (shared by the Go API, which has no backlog limit)
		// stays as it is. With several servers on one database each holds
		// the limit for its own requests, so the backlog can exceed it
		// by at most one request's tasks per other server.
		select {
		case s.admit <- struct{}{}:
		case <-r.Context().Done():
			return nil, r.Context().Err()
		}
		defer func() { <-s.admit }()
		count, err := s.engine.Backlog(r.Context(), n)
		if err != nil {
			return nil, err
		}
		if count+len(subs) > n {
			s.metrics.rejected.WithLabelValues("overloaded").Inc()
			return nil, errorf(http.StatusServiceUnavailable, CodeOverloaded, "the backlog holds %d unfinished tasks and this server accepts at most %d: retry later", count, n)
		}
	}
	ctx := propagation.TraceContext{}.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	return s.engine.SubmitMany(ctx, subs)
}

func (s *Server) listTasks(r *http.Request) (int, any, error) {
	q := r.URL.Query()
	f := store.TaskFilter{Namespace: q.Get("namespace"), Namespaces: scopeNamespaces(requestScope(r)), Workflow: q.Get("workflow"),
		State: state.Task(q.Get("state")), Key: q.Get("key"), Schedule: q.Get("schedule"), Limit: 100}
	if f.State != "" && !f.State.Valid() {
		return 0, nil, fieldError("state", "%q is not a task state", f.State)
	}
	var err error
	if f.Namespace, f.Workflow, err = workflow.ParseFilter(f.Namespace, f.Workflow); err != nil {
		return 0, nil, err
	}
	for _, tf := range []struct {
		name string
		dst  *time.Time
	}{{"created_after", &f.CreatedAfter}, {"created_before", &f.CreatedBefore}} {
		if v := q.Get(tf.name); v != "" {
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				return 0, nil, fieldError(tf.name, "must be an RFC 3339 time, got %q", v)
			}
			*tf.dst = t
		}
	}
	if err := queryTags(q["tag"], &f); err != nil {
		return 0, nil, err
	}
	if v := q.Get("attention"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return 0, nil, fieldError("attention", "must be true or false, got %q", v)
		}
		f.Attention, f.StaleAfter = b, s.engine.StaleAfter()
	}
	if v := q.Get("active"); v != "" {
		if f.Active, err = strconv.ParseBool(v); err != nil {
			return 0, nil, fieldError("active", "must be true or false, got %q", v)
		}
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return 0, nil, fieldError("limit", "must be an integer from 1 to 1000, got %q", v)
		}
		f.Limit = n
	}
	if v := q.Get("cursor"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			return 0, nil, fieldError("cursor", "is not a cursor from an earlier page: %q", v)
		}
		f.BeforeID = n
	}
	tasks, err := s.engine.List(r.Context(), f)
	if err != nil {
		return 0, nil, err
	}
	out := wire.TaskList{Tasks: wire.List(tasks, wire.TaskOf)}
	if out.Tasks == nil {
		out.Tasks = []wire.Task{}
	}
	if len(tasks) == f.Limit {
		out.NextCursor = strconv.FormatInt(tasks[len(tasks)-1].ID, 10)
	}
	return http.StatusOK, out, nil
}

func (s *Server) getTask(r *http.Request) (int, any, error) {
	id, err := pathID(r, "id")
	if err != nil {
		return 0, nil, err
	}
	t, err := s.engine.Get(r.Context(), id)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, wire.TaskOf(*t), nil
}

func (s *Server) taskAction(r *http.Request, do func(*weft.Engine, *http.Request, int64) error) (int, any, error) {
	id, err := pathID(r, "id")
	if err != nil {
		return 0, nil, err
	}
	if err := do(s.engine, r, id); err != nil {
		return 0, nil, err
	}
	t, err := s.engine.Get(r.Context(), id)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, wire.TaskOf(*t), nil
}

// maxReason bounds the reason an operator gives for an action.
const maxReason = 4096

func checkReason(reason string) error {
	if len(reason) > maxReason {
		return fieldError("reason", "must be at most %d bytes", maxReason)
	}
	return nil
}

// taskOperator reads the optional {"reason"} body of a task action and
// names who acts.
func taskOperator(r *http.Request) (weft.Operator, error) {
	var req wire.TaskAction
	if err := decodeOptional(r, &req); err != nil {
		return weft.Operator{}, err
	}
	if err := checkReason(req.Reason); err != nil {
		return weft.Operator{}, err
	}
	return weft.Operator{Actor: operator(r), Reason: req.Reason}, nil
}

func (s *Server) cancelTask(r *http.Request) (int, any, error) {
	op, err := taskOperator(r)
	if err != nil {
		return 0, nil, err
	}
	return s.taskAction(r, func(e *weft.Engine, r *http.Request, id int64) error { return e.CancelAs(r.Context(), id, op) })
}

func (s *Server) retryTask(r *http.Request) (int, any, error) {
	op, err := taskOperator(r)
	if err != nil {
		return 0, nil, err
	}
	return s.taskAction(r, func(e *weft.Engine, r *http.Request, id int64) error { return e.RetryAs(r.Context(), id, op) })
}

// signalTask sends the signal named in the path, with the body's optional
// payload, recording the acting credential in the audit trail.
func (s *Server) signalTask(r *http.Request) (int, any, error) {
	id, err := pathID(r, "id")
	if err != nil {
		return 0, nil, err
	}
	var req wire.SignalRequest
	if err := decodeOptional(r, &req); err != nil {
		return 0, nil, err
	}
	var payload any
	if len(req.Payload) > 0 {
		payload = req.Payload
	}
	delivered, err := s.engine.SignalAs(r.Context(), id, r.PathValue("name"), payload, weft.Operator{Actor: operator(r)})
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, wire.SignalResult{Delivered: delivered}, nil
}

func (s *Server) taskAudit(r *http.Request) (int, any, error) {
	id, err := pathID(r, "id")
	if err != nil {
		return 0, nil, err
	}
	trail, err := s.engine.Audit(r.Context(), id)
	if err != nil {
		return 0, nil, err
	}
	if len(trail) == 0 {
		// An empty trail is all Audit says of an unknown task: only then
		// load the task (with every step) to tell the two apart.
		if _, err := s.engine.Get(r.Context(), id); err != nil {
			return 0, nil, err
		}
		trail = []store.AuditEntry{}
	}
	return http.StatusOK, wire.AuditList{Audit: wire.List(trail, wire.AuditEntryOf)}, nil
}

func (s *Server) getStep(r *http.Request) (int, any, error) {
	id, err := pathID(r, "id")
	if err != nil {
		return 0, nil, err
	}
	st, err := s.engine.Step(r.Context(), id)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, wire.StepOf(*st), nil
}

// operator names who acted, for the audit log.
func operator(r *http.Request) string {
	if p, ok := PrincipalFrom(r.Context()); ok {
		return "api:" + p.Name
	}
	return "api"
}

// decodeOptional decodes a body that may be empty.
func decodeOptional(r *http.Request, v any) error {
	if r.ContentLength == 0 {
		return nil
	}
	return decode(r, v)
}

func (s *Server) stepAction(r *http.Request, do func(id int64) error) (int, any, error) {
	id, err := pathID(r, "id")
	if err != nil {
		return 0, nil, err
	}
	if err := do(id); err != nil {
		return 0, nil, err
	}
	st, err := s.engine.Step(r.Context(), id)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, wire.StepOf(*st), nil
}

func (s *Server) retryStep(r *http.Request) (int, any, error) {
	var req wire.StepAction
	if err := decodeOptional(r, &req); err != nil {
		return 0, nil, err
	}
	if err := checkReason(req.Reason); err != nil {
		return 0, nil, err
	}
	return s.stepAction(r, func(id int64) error {
		return s.engine.RetryStep(r.Context(), id, weft.Operator{Actor: operator(r), Reason: req.Reason})
	})
}

func (s *Server) resolveStep(r *http.Request) (int, any, error) {
	var req wire.StepAction
	if err := decodeOptional(r, &req); err != nil {
		return 0, nil, err
	}
	if err := checkReason(req.Reason); err != nil {
		return 0, nil, err
	}
	return s.stepAction(r, func(id int64) error {
		return s.engine.ResolveStep(r.Context(), weft.StepResolution{StepID: id, EngineID: operator(r), Reason: req.Reason})
	})
}

func (s *Server) completeStep(r *http.Request) (int, any, error) {
	var req wire.CompleteStep
	if err := decode(r, &req); err != nil {
		return 0, nil, err
	}
	if len(req.Result) == 0 {
		return 0, nil, fieldError("result", "is required: the JSON result the step's dependents will see")
	}
	if err := checkReason(req.Reason); err != nil {
		return 0, nil, err
	}
	reason := req.Reason
	if reason == "" {
		reason = "completed by an operator with a result"
	}
	return s.stepAction(r, func(id int64) error {
		return s.engine.ResolveStep(r.Context(), weft.StepResolution{StepID: id, EngineID: operator(r), Reason: reason, Result: req.Result})
	})
}
