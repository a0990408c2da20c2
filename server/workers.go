package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/weftrun/weft/internal/ident"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/internal/durable"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/wire"
	"github.com/weftrun/weft/workflow"
)

// The remote-worker protocol is a transport: each route validates its
// request, translates it into one call of the engine's Workers and writes
// the answer. The lifecycle of the steps behind it is the engine's.

func checkNames(field string, names []string, required bool) error {
	if required && len(names) == 0 {
		return fieldError(field, "must list at least one name")
	}
	if len(names) > 256 {
		return fieldError(field, "must list at most 256 names")
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
func owner(ctx context.Context) string {
	p, _ := PrincipalFrom(ctx)
	return p.Owner()
}

func (s *Server) registerWorker(r *http.Request) (int, any, error) {
	var req wire.RegisterWorker
	if err := decode(r, &req); err != nil {
		return 0, nil, err
	}
	out, err := s.register(r.Context(), req)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusCreated, out, nil
}

// register registers a remote worker owned by the call's credential:
// POST /v1/workers and its gRPC twin.
func (s *Server) register(ctx context.Context, req wire.RegisterWorker) (wire.WorkerRegistered, error) {
	if !workflow.ValidName(req.Name) {
		return wire.WorkerRegistered{}, fieldError("name", "is required: %s", ident.Rule)
	}
	if err := checkNames("handlers", req.Handlers, true); err != nil {
		return wire.WorkerRegistered{}, err
	}
	err := checkNames("namespaces", req.Namespaces, false)
	if err != nil {
		return wire.WorkerRegistered{}, err
	}
	if req.Namespaces, err = scopedNamespaces(ctx, req.Namespaces); err != nil {
		return wire.WorkerRegistered{}, err
	}
	if p, _ := PrincipalFrom(ctx); p.Kind == "jwt" && p.ID == "" {
		return wire.WorkerRegistered{}, errorf(http.StatusForbidden, CodeForbidden, "a token without a subject (sub) cannot own a worker")
	}
	id, err := s.workers.Register(ctx, req.Name, owner(ctx), req.Handlers...)
	if err != nil {
		return wire.WorkerRegistered{}, err
	}
	s.log.Info("remote worker registered", "worker_id", id, "handlers", strings.Join(req.Handlers, ","), "namespaces", strings.Join(req.Namespaces, ","))
	return wire.WorkerRegistered{WorkerID: id, Namespaces: append([]string{}, req.Namespaces...), Handlers: req.Handlers,
		LeaseTTLMS: s.workers.LeaseTTL().Milliseconds(), HeartbeatIntervalMS: s.workers.HeartbeatInterval().Milliseconds(),
		MaxWaitMS: s.opts.MaxPoll.Milliseconds()}, nil
}

func (s *Server) deregisterWorker(r *http.Request) (int, any, error) {
	return noContent(s.workers.Stop(r.Context(), r.PathValue("id"), owner(r.Context())))
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
	c, err := s.checkClaim(r.Context(), req)
	if err != nil {
		return 0, nil, err
	}
	steps, err := s.workers.Claim(r.Context(), r.PathValue("id"), owner(r.Context()), c)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, wire.ClaimResponse{Steps: wire.List(steps, claimedStep)}, nil
}

// checkClaim validates a claim and bounds its namespaces by the call's
// scope: the REST claim's and the gRPC stream's.
func (s *Server) checkClaim(ctx context.Context, req wire.ClaimRequest) (weft.WorkerClaim, error) {
	if err := checkNames("handlers", req.Handlers, true); err != nil {
		return weft.WorkerClaim{}, err
	}
	if err := checkNames("namespaces", req.Namespaces, false); err != nil {
		return weft.WorkerClaim{}, err
	}
	if req.Max == 0 {
		req.Max = 1
	}
	if req.Max < 1 || req.Max > 100 {
		return weft.WorkerClaim{}, fieldError("max", "must be from 1 to 100, got %d", req.Max)
	}
	// Compared in milliseconds, before any multiplication: a huge wait_ms
	// would overflow a time.Duration and wrap around to an accepted value.
	if req.WaitMS < 0 || req.WaitMS > s.opts.MaxPoll.Milliseconds() {
		return weft.WorkerClaim{}, fieldError("wait_ms", "must be from 0 to %d, got %d", s.opts.MaxPoll.Milliseconds(), req.WaitMS)
	}
	namespaces, err := scopedNamespaces(ctx, req.Namespaces)
	if err != nil {
		return weft.WorkerClaim{}, err
	}
	return weft.WorkerClaim{Handlers: req.Handlers, Namespaces: namespaces, Max: req.Max, Wait: time.Duration(req.WaitMS) * time.Millisecond}, nil
}

// claimedStep is a claimed step as a worker receives it.
func claimedStep(c weft.RemoteStep) wire.ClaimedStep {
	j := wire.ClaimedStep{StepID: c.ID, TaskID: c.TaskID, Namespace: c.Namespace, Workflow: c.Workflow, Version: c.Version,
		Step: c.Name, Handler: c.Handler, Attempt: c.Attempts, Input: c.Input, Deps: c.Deps, Config: rawJSON(c.Config),
		Checkpoint: rawJSON(c.Checkpoint), TimeoutMS: c.Timeout.Milliseconds(), Fence: toWireFence(c.Fence),
		TraceParent: c.TraceParent, TraceState: c.TraceState}
	switch c.Kind {
	case store.KindItem:
		j.Batch = rawJSON(c.Item)
	case store.KindFunction, store.KindCall:
		j.Kind = c.Kind
		j.Calls = make([]wire.RecordedCall, len(c.Calls))
		for i, r := range c.Calls {
			j.Calls[i] = durable.WireRecorded(r)
		}
	}
	if j.Deps == nil {
		j.Deps = map[string]json.RawMessage{}
	}
	if !c.Deadline.IsZero() {
		d := c.Deadline
		j.Deadline = &d
	}
	return j
}

func (s *Server) heartbeat(r *http.Request) (int, any, error) {
	var req wire.Heartbeat
	if err := decode(r, &req); err != nil {
		return 0, nil, err
	}
	out, err := s.workerHeartbeat(r.Context(), r.PathValue("id"), req)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, out, nil
}

// workerHeartbeat is a worker's heartbeat, whatever its transport.
func (s *Server) workerHeartbeat(ctx context.Context, workerID string, req wire.Heartbeat) (wire.HeartbeatResponse, error) {
	if len(req.Steps) > 10000 {
		return wire.HeartbeatResponse{}, fieldError("steps", "must list at most 10000 fences")
	}
	held := make([]weft.Fence, len(req.Steps))
	for i := range req.Steps {
		f, err := checkFence(fmt.Sprintf("steps[%d]", i), &req.Steps[i])
		if err != nil {
			return wire.HeartbeatResponse{}, err
		}
		held[i] = f
	}
	load, err := heartbeatLoad(&req)
	if err != nil {
		return wire.HeartbeatResponse{}, err
	}
	lost, preempt, err := s.workers.HeartbeatLoad(ctx, workerID, owner(ctx), held, load)
	if err != nil {
		return wire.HeartbeatResponse{}, err
	}
	out := wire.HeartbeatResponse{Lost: make([]wire.Fence, len(lost))}
	for i, f := range lost {
		out.Lost[i] = toWireFence(f)
	}
	for _, p := range preempt {
		out.Preempt = append(out.Preempt, wire.Preempt{Fence: toWireFence(p.Fence), Reason: p.Reason})
	}
	return out, nil
}

// reported is the answer to a worker's complete or fail.
func reported(o weft.Recorded) wire.Reported {
	body := wire.Reported{State: string(o.State), Error: o.Error}
	if !o.RunAt.IsZero() {
		at := o.RunAt
		body.RetryAt = &at
	}
	return body
}

// answer is a worker route's answer: body with 200, or err.
func answer[T any](body T, err error) (int, any, error) {
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, body, nil
}

// noContent is a worker route's answer without a body.
func noContent(err error) (int, any, error) {
	if err != nil {
		return 0, nil, err
	}
	return http.StatusNoContent, nil, nil
}

func (s *Server) workerComplete(r *http.Request) (int, any, error) {
	var req wire.Complete
	if err := decodeOutcome(r, &req); err != nil {
		return 0, nil, err
	}
	return answer(s.complete(r.Context(), r.PathValue("id"), req))
}

// complete records a worker's result, whatever its transport.
func (s *Server) complete(ctx context.Context, workerID string, req wire.Complete) (wire.Reported, error) {
	f, err := checkFence("fence", req.Fence)
	if err != nil {
		return wire.Reported{}, err
	}
	if len(req.Result) > 0 && !json.Valid(req.Result) {
		return wire.Reported{}, fieldError("result", "must be JSON")
	}
	o, err := s.workers.Complete(ctx, workerID, owner(ctx), f, req.Result)
	if err != nil {
		return wire.Reported{}, err
	}
	return reported(o), nil
}

func (s *Server) workerCalls(r *http.Request) (int, any, error) {
	var req wire.Calls
	if err := decodeOutcome(r, &req); err != nil {
		return 0, nil, err
	}
	return answer(s.calls(r.Context(), r.PathValue("id"), req))
}

// maxCalls bounds the new calls one report of a durable function makes.
const maxCalls = 1000

// calls records the new calls of a worker's durable function, whatever
// its transport.
func (s *Server) calls(ctx context.Context, workerID string, req wire.Calls) (wire.Reported, error) {
	f, err := checkFence("fence", req.Fence)
	if err != nil {
		return wire.Reported{}, err
	}
	if len(req.Calls) > maxCalls {
		return wire.Reported{}, fieldError("calls", "must list at most %d calls, got %d", maxCalls, len(req.Calls))
	}
	calls := make([]weft.FunctionCall, len(req.Calls))
	for i, c := range req.Calls {
		const week = int64(7 * 24 * time.Hour / time.Millisecond)
		if c.SleepMS < 0 || c.SleepMS > 52*week {
			return wire.Reported{}, fieldError(fmt.Sprintf("calls[%d].sleep_ms", i), "must be from 0 to 52 weeks, got %d", c.SleepMS)
		}
		if c.TimeoutMS < 0 || c.TimeoutMS > 52*week {
			return wire.Reported{}, fieldError(fmt.Sprintf("calls[%d].timeout_ms", i), "must be from 0 to 52 weeks, got %d", c.TimeoutMS)
		}
		// The bounds openapi.json gives, checked before the worker is
		// looked up (the engine checks them again as it records calls).
		if err := workflow.CheckAttempts(c.MaxAttempts); err != nil {
			return wire.Reported{}, fieldError(fmt.Sprintf("calls[%d].max_attempts", i), "%v", err)
		}
		if err := workflow.CheckPriority(c.Priority); err != nil {
			return wire.Reported{}, fieldError(fmt.Sprintf("calls[%d].priority", i), "%v", err)
		}
		if len(c.Input) > 0 && !json.Valid(c.Input) {
			return wire.Reported{}, fieldError(fmt.Sprintf("calls[%d].input", i), "must be JSON")
		}
		calls[i] = weft.FunctionCall{Name: c.Name, Kind: c.Kind, Sleep: time.Duration(c.SleepMS) * time.Millisecond, Signal: c.Signal,
			Timeout: time.Duration(c.TimeoutMS) * time.Millisecond, MaxAttempts: c.MaxAttempts, Priority: c.Priority, Workflow: c.Workflow, Input: c.Input}
	}
	o, err := s.workers.Calls(ctx, workerID, owner(ctx), f, calls)
	if err != nil {
		return wire.Reported{}, err
	}
	return reported(o), nil
}

// maxFailureMessage bounds the error text a worker reports.
const maxFailureMessage = 64 << 10

func (s *Server) workerFail(r *http.Request) (int, any, error) {
	var req wire.Fail
	if err := decodeOutcome(r, &req); err != nil {
		return 0, nil, err
	}
	return answer(s.fail(r.Context(), r.PathValue("id"), req))
}

// fail records a worker's failure, whatever its transport.
func (s *Server) fail(ctx context.Context, workerID string, req wire.Fail) (wire.Reported, error) {
	f, err := checkFence("fence", req.Fence)
	if err != nil {
		return wire.Reported{}, err
	}
	if req.Error == "" {
		return wire.Reported{}, fieldError("error", "is required: what went wrong")
	}
	if len(req.Error) > maxFailureMessage {
		req.Error = req.Error[:maxFailureMessage]
	}
	for _, d := range []struct {
		field string
		ms    int64
	}{{"retry_after_ms", req.RetryAfterMS}, {"snooze_ms", req.SnoozeMS}} {
		if d.ms < 0 || d.ms > int64(7*24*time.Hour/time.Millisecond) {
			return wire.Reported{}, fieldError(d.field, "must be from 0 to a week")
		}
	}
	if req.Preempted && (req.Permanent || req.RetryAfterMS > 0) {
		return wire.Reported{}, fieldError("preempted", "cannot be combined with permanent or retry_after_ms")
	}
	if req.SnoozeMS > 0 && (req.Permanent || req.RetryAfterMS > 0 || req.Preempted) {
		return wire.Reported{}, fieldError("snooze_ms", "cannot be combined with permanent, retry_after_ms or preempted")
	}
	o, err := s.workers.Fail(ctx, workerID, owner(ctx), f, weft.Failure{Message: req.Error, Permanent: req.Permanent,
		RetryAfter: time.Duration(req.RetryAfterMS) * time.Millisecond, Preempted: req.Preempted,
		Snooze: time.Duration(req.SnoozeMS) * time.Millisecond})
	if err != nil {
		return wire.Reported{}, err
	}
	return reported(o), nil
}

func (s *Server) workerCheckpoint(r *http.Request) (int, any, error) {
	var req wire.Checkpoint
	if err := decode(r, &req); err != nil {
		return 0, nil, err
	}
	return noContent(s.checkpoint(r.Context(), r.PathValue("id"), req))
}

// checkpoint stores a worker's checkpoint, whatever its transport.
func (s *Server) checkpoint(ctx context.Context, workerID string, req wire.Checkpoint) error {
	f, err := checkFence("fence", req.Fence)
	if err != nil {
		return err
	}
	if len(req.Checkpoint) == 0 {
		return fieldError("checkpoint", "is required")
	}
	return s.workers.Checkpoint(ctx, workerID, owner(ctx), f, req.Checkpoint)
}

func (s *Server) workerProgress(r *http.Request) (int, any, error) {
	var req wire.Progress
	if err := decode(r, &req); err != nil {
		return 0, nil, err
	}
	return noContent(s.progress(r.Context(), r.PathValue("id"), req))
}

// progress records how far a worker's step got, whatever its transport.
func (s *Server) progress(ctx context.Context, workerID string, req wire.Progress) error {
	f, err := checkFence("fence", req.Fence)
	if err != nil {
		return err
	}
	if req.Fraction == nil {
		return fieldError("fraction", "is required: how far the step got, from 0 to 1")
	}
	if *req.Fraction < 0 || *req.Fraction > 1 {
		return fieldError("fraction", "must be from 0 to 1, got %v", *req.Fraction)
	}
	if len(req.Message) > 4096 {
		return fieldError("message", "must be at most 4096 bytes")
	}
	return s.workers.Progress(ctx, workerID, owner(ctx), f, *req.Fraction, req.Message)
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
func scopedNamespaces(ctx context.Context, asked []string) ([]string, error) {
	sc := scopeFrom(ctx)
	if len(asked) == 0 {
		return sc.Filter(), nil
	}
	for i, ns := range asked {
		if !sc.Has(ns) {
			return nil, outOfScope(fmt.Sprintf("namespaces[%d]", i), ns, sc)
		}
	}
	return asked, nil
}
