package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/wire"
	"github.com/weftrun/weft/workflow"
)

// The remote-worker protocol is a transport: each route validates its
// request, translates it into one call of the engine's Workers and writes
// the answer. The lifecycle of the steps behind it is the engine's.

// maxNameLen bounds a worker's, a handler's and a namespace's name in a
// request.
const maxNameLen = 128

var namePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$`)

func checkNames(field string, names []string, required bool) error {
	if required && len(names) == 0 {
		return fieldError(field, "must list at least one name")
	}
	if len(names) > 256 {
		return fieldError(field, "must list at most 256 names")
	}
	for i, n := range names {
		if len(n) > maxNameLen {
			return fieldError(fmt.Sprintf("%s[%d]", field, i), "%q is not a valid name (letters, digits, '_', '.', '-'; at most %d)", n, maxNameLen)
		}
	}
	if err := workflow.CheckNames(names); err != nil {
		var ne *workflow.NameError
		errors.As(err, &ne)
		return fieldError(fmt.Sprintf("%s[%d]", field, ne.Index), "%v", err)
	}
	return nil
}

// owner is the principal a worker belongs to: the credential's id (an API
// key's id, a token's subject), never its display name, which two keys may
// share. With authentication disabled every request is "anonymous", so
// workers work as before.
func owner(r *http.Request) string {
	p, _ := PrincipalFrom(r.Context())
	return p.Owner()
}

func (s *Server) registerWorker(r *http.Request) (int, any, error) {
	var req wire.RegisterWorker
	if err := decode(r, &req); err != nil {
		return 0, nil, err
	}
	if !namePattern.MatchString(req.Name) {
		return 0, nil, fieldError("name", "is required: letters, digits, '_', '.', '-' (at most 128)")
	}
	if err := checkNames("handlers", req.Handlers, true); err != nil {
		return 0, nil, err
	}
	err := checkNames("namespaces", req.Namespaces, false)
	if err != nil {
		return 0, nil, err
	}
	if req.Namespaces, err = scopedNamespaces(r, req.Namespaces); err != nil {
		return 0, nil, err
	}
	if p, _ := PrincipalFrom(r.Context()); p.Kind == "jwt" && p.ID == "" {
		return 0, nil, errorf(http.StatusForbidden, CodeForbidden, "a token without a subject (sub) cannot own a worker")
	}
	id, err := s.workers.Register(r.Context(), req.Name, owner(r), req.Handlers...)
	if err != nil {
		return 0, nil, err
	}
	s.log.Info("remote worker registered", "worker_id", id, "handlers", strings.Join(req.Handlers, ","), "namespaces", strings.Join(req.Namespaces, ","))
	return http.StatusCreated, wire.WorkerRegistered{WorkerID: id, Namespaces: append([]string{}, req.Namespaces...), Handlers: req.Handlers,
		LeaseTTLMS: s.workers.LeaseTTL().Milliseconds(), HeartbeatIntervalMS: s.workers.HeartbeatInterval().Milliseconds(),
		MaxWaitMS: s.opts.MaxPoll.Milliseconds()}, nil
}

func (s *Server) deregisterWorker(r *http.Request) (int, any, error) {
	if err := s.workers.Stop(r.Context(), r.PathValue("id"), owner(r)); err != nil {
		return 0, nil, err
	}
	return http.StatusNoContent, nil, nil
}

// checkFence validates a fence a worker sends back.
func checkFence(field string, f *wire.Fence) (weft.Fence, error) {
	if f == nil {
		return weft.Fence{}, fieldError(field, "is required: the fence the step was claimed with")
	}
	if f.StepID < 1 || f.Attempt < 1 || f.LeaseID == 0 {
		return weft.Fence{}, fieldError(field, "must carry step_id, attempt and lease_id from the claim")
	}
	return weft.Fence{StepID: f.StepID, Attempt: f.Attempt, LeaseID: f.LeaseID}, nil
}

func toWireFence(f weft.Fence) wire.Fence {
	return wire.Fence{StepID: f.StepID, Attempt: f.Attempt, LeaseID: f.LeaseID}
}

func (s *Server) claim(r *http.Request) (int, any, error) {
	var req wire.ClaimRequest
	if err := decode(r, &req); err != nil {
		return 0, nil, err
	}
	if err := checkNames("handlers", req.Handlers, true); err != nil {
		return 0, nil, err
	}
	if err := checkNames("namespaces", req.Namespaces, false); err != nil {
		return 0, nil, err
	}
	if req.Max == 0 {
		req.Max = 1
	}
	if req.Max < 1 || req.Max > 100 {
		return 0, nil, fieldError("max", "must be from 1 to 100, got %d", req.Max)
	}
	// Compared in milliseconds, before any multiplication: a huge wait_ms
	// would overflow a time.Duration and wrap around to an accepted value.
	if req.WaitMS < 0 || req.WaitMS > s.opts.MaxPoll.Milliseconds() {
		return 0, nil, fieldError("wait_ms", "must be from 0 to %d, got %d", s.opts.MaxPoll.Milliseconds(), req.WaitMS)
	}
	namespaces, err := scopedNamespaces(r, req.Namespaces)
	if err != nil {
		return 0, nil, err
	}
	steps, err := s.workers.Claim(r.Context(), r.PathValue("id"), owner(r), weft.WorkerClaim{Handlers: req.Handlers, Namespaces: namespaces,
		Max: req.Max, Wait: time.Duration(req.WaitMS) * time.Millisecond})
	if err != nil {
		return 0, nil, err
	}
	out := wire.ClaimResponse{Steps: make([]wire.ClaimedStep, len(steps))}
	for i, c := range steps {
		j := wire.ClaimedStep{StepID: c.ID, TaskID: c.TaskID, Namespace: c.Namespace, Workflow: c.Workflow, Version: c.Version,
			Step: c.Name, Handler: c.Handler, Attempt: c.Attempts, Input: c.Input, Deps: c.Deps, Config: rawJSON(c.Config),
			Checkpoint: rawJSON(c.Checkpoint), Batch: rawJSON(c.Item), TimeoutMS: c.Timeout.Milliseconds(), Fence: toWireFence(c.Fence),
			TraceParent: c.TraceParent, TraceState: c.TraceState}
		if j.Deps == nil {
			j.Deps = map[string]json.RawMessage{}
		}
		if !c.Deadline.IsZero() {
			d := c.Deadline
			j.Deadline = &d
		}
		out.Steps[i] = j
	}
	return http.StatusOK, out, nil
}

func (s *Server) heartbeat(r *http.Request) (int, any, error) {
	var req wire.Heartbeat
	if err := decode(r, &req); err != nil {
		return 0, nil, err
	}
	if len(req.Steps) > 10000 {
		return 0, nil, fieldError("steps", "must list at most 10000 fences")
	}
	held := make([]weft.Fence, len(req.Steps))
	for i := range req.Steps {
		f, err := checkFence(fmt.Sprintf("steps[%d]", i), &req.Steps[i])
		if err != nil {
			return 0, nil, err
		}
		held[i] = f
	}
	load, err := heartbeatLoad(&req)
	if err != nil {
		return 0, nil, err
	}
	lost, preempt, err := s.workers.HeartbeatLoad(r.Context(), r.PathValue("id"), owner(r), held, load)
	if err != nil {
		return 0, nil, err
	}
	out := wire.HeartbeatResponse{Lost: make([]wire.Fence, len(lost))}
	for i, f := range lost {
		out.Lost[i] = toWireFence(f)
	}
	for _, p := range preempt {
		out.Preempt = append(out.Preempt, wire.Preempt{Fence: toWireFence(p.Fence), Reason: p.Reason})
	}
	return http.StatusOK, out, nil
}

// reported is the answer to a worker's complete or fail.
func reported(o weft.Recorded) (int, any, error) {
	body := wire.Reported{State: string(o.State), Error: o.Error}
	if !o.RunAt.IsZero() {
		at := o.RunAt
		body.RetryAt = &at
	}
	return http.StatusOK, body, nil
}

func (s *Server) workerComplete(r *http.Request) (int, any, error) {
	var req wire.Complete
	if err := decodeOutcome(r, &req); err != nil {
		return 0, nil, err
	}
	f, err := checkFence("fence", req.Fence)
	if err != nil {
		return 0, nil, err
	}
	if len(req.Result) > 0 && !json.Valid(req.Result) {
		return 0, nil, fieldError("result", "must be JSON")
	}
	o, err := s.workers.Complete(r.Context(), r.PathValue("id"), owner(r), f, req.Result)
	if err != nil {
		return 0, nil, err
	}
	return reported(o)
}

// maxFailureMessage bounds the error text a worker reports.
const maxFailureMessage = 64 << 10

func (s *Server) workerFail(r *http.Request) (int, any, error) {
	var req wire.Fail
	if err := decodeOutcome(r, &req); err != nil {
		return 0, nil, err
	}
	f, err := checkFence("fence", req.Fence)
	if err != nil {
		return 0, nil, err
	}
	if req.Error == "" {
		return 0, nil, fieldError("error", "is required: what went wrong")
	}
	if len(req.Error) > maxFailureMessage {
		req.Error = req.Error[:maxFailureMessage]
	}
	if req.RetryAfterMS < 0 || req.RetryAfterMS > int64(7*24*time.Hour/time.Millisecond) {
		return 0, nil, fieldError("retry_after_ms", "must be from 0 to a week")
	}
	if req.Preempted && (req.Permanent || req.RetryAfterMS > 0) {
		return 0, nil, fieldError("preempted", "cannot be combined with permanent or retry_after_ms")
	}
	o, err := s.workers.Fail(r.Context(), r.PathValue("id"), owner(r), f, weft.Failure{Message: req.Error, Permanent: req.Permanent,
		RetryAfter: time.Duration(req.RetryAfterMS) * time.Millisecond, Preempted: req.Preempted})
	if err != nil {
		return 0, nil, err
	}
	return reported(o)
}

func (s *Server) workerCheckpoint(r *http.Request) (int, any, error) {
	var req wire.Checkpoint
	if err := decode(r, &req); err != nil {
		return 0, nil, err
	}
	f, err := checkFence("fence", req.Fence)
	if err != nil {
		return 0, nil, err
	}
	if len(req.Checkpoint) == 0 {
		return 0, nil, fieldError("checkpoint", "is required")
	}
	if err := s.workers.Checkpoint(r.Context(), r.PathValue("id"), owner(r), f, req.Checkpoint); err != nil {
		return 0, nil, err
	}
	return http.StatusNoContent, nil, nil
}

func (s *Server) workerProgress(r *http.Request) (int, any, error) {
	var req wire.Progress
	if err := decode(r, &req); err != nil {
		return 0, nil, err
	}
	f, err := checkFence("fence", req.Fence)
	if err != nil {
		return 0, nil, err
	}
	if req.Fraction == nil {
		return 0, nil, fieldError("fraction", "is required: how far the step got, from 0 to 1")
	}
	if *req.Fraction < 0 || *req.Fraction > 1 {
		return 0, nil, fieldError("fraction", "must be from 0 to 1, got %v", *req.Fraction)
	}
	if len(req.Message) > 4096 {
		return 0, nil, fieldError("message", "must be at most 4096 bytes")
	}
	if err := s.workers.Progress(r.Context(), r.PathValue("id"), owner(r), f, *req.Fraction, req.Message); err != nil {
		return 0, nil, err
	}
	return http.StatusNoContent, nil, nil
}

// heartbeatLoad validates what a heartbeat tells about the worker's slots
// (for preemption).
func heartbeatLoad(req *wire.Heartbeat) (weft.WorkerLoad, error) {
	if req.Free != nil && *req.Free < 0 {
		return weft.WorkerLoad{}, fieldError("free", "must be 0 or more, got %d", *req.Free)
	}
	if err := checkNames("handlers", req.Handlers, false); err != nil {
		return weft.WorkerLoad{}, err
	}
	if err := checkNames("namespaces", req.Namespaces, false); err != nil {
		return weft.WorkerLoad{}, err
	}
	var load weft.WorkerLoad
	if req.Free != nil && *req.Free == 0 {
		load = weft.WorkerLoad{Full: true, Handlers: req.Handlers, Namespaces: req.Namespaces}
	}
	return load, nil
}

// scopedNamespaces is where a worker asking for namespaces (none: every
// one) may take steps: those it asks for, each within the credential's
// scope, or, asking for none, the whole scope (nil: every namespace).
func scopedNamespaces(r *http.Request, asked []string) ([]string, error) {
	sc := requestScope(r)
	if len(asked) == 0 {
		return scopeNamespaces(sc), nil
	}
	for i, ns := range asked {
		if !sc.Has(ns) {
			return nil, outOfScope(fmt.Sprintf("namespaces[%d]", i), ns, sc)
		}
	}
	return asked, nil
}
