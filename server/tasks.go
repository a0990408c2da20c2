package server

import (
	"context"
	"errors"
	"net/http"
	"net/url"
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
	res, err := s.submitOne(r.Context(), r.Header, req)
	if err != nil {
		return 0, nil, err
	}
	status := http.StatusCreated
	if res.Duplicate {
		status = http.StatusOK
	}
	return status, res, nil
}

// submitOne validates a submission, checks its namespace against the
// call's scope and submits it: POST /v1/tasks and its gRPC twin. hdr holds
// the caller's traceparent, if any.
func (s *Server) submitOne(ctx context.Context, hdr http.Header, req wire.SubmitRequest) (wire.SubmitResponse, error) {
	sub, err := submission(req, "")
	if err != nil {
		return wire.SubmitResponse{}, err
	}
	if err := checkScope(ctx, "workflow", targetNamespace(sub.Workflow)); err != nil {
		return wire.SubmitResponse{}, err
	}
	res, err := s.submit(ctx, hdr, []weft.Submission{sub})
	if err != nil {
		return wire.SubmitResponse{}, err
	}
	return submitted(res[0]), nil
}

// submitBatch submits up to wire.MaxBatch tasks in one transaction: all of
// them or none. A refused task is named by its index: tasks[2].priority.
func (s *Server) submitBatch(r *http.Request) (int, any, error) {
	var req wire.SubmitBatch
	if err := decode(r, &req); err != nil {
		return 0, nil, err
	}
	out, err := s.submitMany(r.Context(), r.Header, req)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, out, nil
}

// submitMany is POST /v1/tasks/batch and its gRPC twin.
func (s *Server) submitMany(ctx context.Context, hdr http.Header, req wire.SubmitBatch) (wire.SubmittedBatch, error) {
	if len(req.Tasks) == 0 || len(req.Tasks) > wire.MaxBatch {
		return wire.SubmittedBatch{}, fieldError("tasks", "must hold 1 to %d tasks, got %d", wire.MaxBatch, len(req.Tasks))
	}
	subs := make([]weft.Submission, len(req.Tasks))
	for i, t := range req.Tasks {
		var err error
		if subs[i], err = submission(t, "tasks["+strconv.Itoa(i)+"]."); err != nil {
			return wire.SubmittedBatch{}, err
		}
		if err := checkScope(ctx, "tasks["+strconv.Itoa(i)+"].workflow", targetNamespace(subs[i].Workflow)); err != nil {
			return wire.SubmittedBatch{}, err
		}
	}
	res, err := s.submit(ctx, hdr, subs)
	if se, ok := errors.AsType[*weft.SubmissionError](err); ok {
		if fe, ok := errors.AsType[*store.FieldError](se.Err); ok {
			return wire.SubmittedBatch{}, inField("tasks["+strconv.Itoa(se.Index)+"]."+fe.Field, err)
		}
	}
	if err != nil {
		return wire.SubmittedBatch{}, err
	}
	out := wire.SubmittedBatch{Tasks: make([]wire.SubmitResponse, len(res))}
	for i, sr := range res {
		out.Tasks[i] = submitted(sr)
	}
	return out, nil
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
func (s *Server) submit(ctx context.Context, hdr http.Header, subs []weft.Submission) ([]weft.SubmitResult, error) {
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
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		defer func() { <-s.admit }()
		count, err := s.engine.Backlog(ctx, n)
		if err != nil {
			return nil, err
		}
		if count+len(subs) > n {
			s.metrics.rejected.WithLabelValues("overloaded").Inc()
			return nil, errorf(http.StatusServiceUnavailable, CodeOverloaded, "the backlog holds %d unfinished tasks and this server accepts at most %d: retry later", count, n)
		}
	}
	ctx = propagation.TraceContext{}.Extract(ctx, propagation.HeaderCarrier(hdr))
	return s.engine.SubmitMany(ctx, subs)
}

func (s *Server) listTasks(r *http.Request) (int, any, error) {
	out, err := s.taskList(r.Context(), r.URL.Query())
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, out, nil
}

// taskList is GET /v1/tasks and its gRPC twin, which passes its filter as
// the same query parameters: one page of the tasks the filter and the
// call's scope select.
func (s *Server) taskList(ctx context.Context, q url.Values) (wire.TaskList, error) {
	f := store.TaskFilter{Namespace: q.Get("namespace"), Namespaces: scopeFrom(ctx).Filter(), Workflow: q.Get("workflow"),
		State: state.Task(q.Get("state")), Key: q.Get("key"), Schedule: q.Get("schedule"), Limit: 100}
	if f.State != "" && !f.State.Valid() {
		return wire.TaskList{}, fieldError("state", "%q is not a task state", f.State)
	}
	var err error
	if f.Namespace, f.Workflow, err = workflow.ParseFilter(f.Namespace, f.Workflow); err != nil {
		return wire.TaskList{}, err
	}
	for _, tf := range []struct {
		name string
		dst  *time.Time
	}{{"created_after", &f.CreatedAfter}, {"created_before", &f.CreatedBefore}} {
		if v := q.Get(tf.name); v != "" {
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				return wire.TaskList{}, fieldError(tf.name, "must be an RFC 3339 time, got %q", v)
			}
			*tf.dst = t
		}
	}
	if err := queryTags(q["tag"], &f); err != nil {
		return wire.TaskList{}, err
	}
	if v := q.Get("attention"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return wire.TaskList{}, fieldError("attention", "must be true or false, got %q", v)
		}
		f.Attention, f.StaleAfter = b, s.engine.StaleAfter()
	}
	if v := q.Get("active"); v != "" {
		if f.Active, err = strconv.ParseBool(v); err != nil {
			return wire.TaskList{}, fieldError("active", "must be true or false, got %q", v)
		}
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return wire.TaskList{}, fieldError("limit", "must be an integer from 1 to 1000, got %q", v)
		}
		f.Limit = n
	}
	if v := q.Get("cursor"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			return wire.TaskList{}, fieldError("cursor", "is not a cursor from an earlier page: %q", v)
		}
		f.BeforeID = n
	}
	tasks, err := s.engine.List(ctx, f)
	if err != nil {
		return wire.TaskList{}, err
	}
	out := wire.TaskList{Tasks: wire.List(tasks, wire.TaskOf)}
	if out.Tasks == nil {
		out.Tasks = []wire.Task{}
	}
	if len(tasks) == f.Limit {
		out.NextCursor = strconv.FormatInt(tasks[len(tasks)-1].ID, 10)
	}
	return out, nil
}

func (s *Server) getTask(r *http.Request) (int, any, error) {
	id, err := pathID(r, "id")
	if err != nil {
		return 0, nil, err
	}
	t, err := s.task(r.Context(), id)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, t, nil
}

// task reads a task with its steps.
func (s *Server) task(ctx context.Context, id int64) (wire.Task, error) {
	t, err := s.engine.Get(ctx, id)
	if err != nil {
		return wire.Task{}, err
	}
	return wire.TaskOf(*t), nil
}

// checkReason refuses a reason no action takes (store.CheckReason) before
// the action starts.
func checkReason(reason string) error {
	if err := store.CheckReason(reason); err != nil {
		return inField("reason", err)
	}
	return nil
}

// taskOperator reads the optional {"reason"} body of an action and names
// who acts.
func taskOperator(r *http.Request) (weft.Operator, error) {
	var req wire.TaskAction
	if err := decodeOptional(r, &req); err != nil {
		return weft.Operator{}, err
	}
	if err := checkReason(req.Reason); err != nil {
		return weft.Operator{}, err
	}
	return weft.Operator{Actor: operator(r.Context()), Reason: req.Reason}, nil
}

// taskAction is what cancelling or retrying a task does, whatever the
// transport: it checks the reason, acts as the call's credential and
// answers the task as it now stands.
func (s *Server) taskAction(ctx context.Context, id int64, req wire.TaskAction, do func(context.Context, int64, weft.Operator) error) (wire.Task, error) {
	if err := checkReason(req.Reason); err != nil {
		return wire.Task{}, err
	}
	if err := do(ctx, id, weft.Operator{Actor: operator(ctx), Reason: req.Reason}); err != nil {
		return wire.Task{}, err
	}
	return s.task(ctx, id)
}

// taskActionRoute serves a task action's route: the optional {"reason"}
// body.
func (s *Server) taskActionRoute(r *http.Request, do func(context.Context, int64, weft.Operator) error) (int, any, error) {
	id, err := pathID(r, "id")
	if err != nil {
		return 0, nil, err
	}
	var req wire.TaskAction
	if err := decodeOptional(r, &req); err != nil {
		return 0, nil, err
	}
	t, err := s.taskAction(r.Context(), id, req, do)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, t, nil
}

func (s *Server) cancelTask(r *http.Request) (int, any, error) {
	return s.taskActionRoute(r, s.engine.CancelAs)
}

func (s *Server) retryTask(r *http.Request) (int, any, error) {
	return s.taskActionRoute(r, s.engine.RetryAs)
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
	res, err := s.signal(r.Context(), id, r.PathValue("name"), req)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, res, nil
}

// signal sends signal name to task id as the call's credential.
func (s *Server) signal(ctx context.Context, id int64, name string, req wire.SignalRequest) (wire.SignalResult, error) {
	var payload any
	if len(req.Payload) > 0 {
		payload = req.Payload
	}
	delivered, err := s.engine.SignalAs(ctx, id, name, payload, weft.Operator{Actor: operator(ctx)})
	if err != nil {
		return wire.SignalResult{}, err
	}
	return wire.SignalResult{Delivered: delivered}, nil
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
func operator(ctx context.Context) string {
	if p, ok := PrincipalFrom(ctx); ok {
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
		return s.engine.RetryStep(r.Context(), id, weft.Operator{Actor: operator(r.Context()), Reason: req.Reason})
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
		return s.engine.ResolveStep(r.Context(), weft.StepResolution{StepID: id, EngineID: operator(r.Context()), Reason: req.Reason})
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
		return s.engine.ResolveStep(r.Context(), weft.StepResolution{StepID: id, EngineID: operator(r.Context()), Reason: reason, Result: req.Result})
	})
}
