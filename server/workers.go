package server

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// A remote worker is recorded in the store as an engine of its own: its
// claims are leased to it, its heartbeats extend them, and when it stops
// heartbeating the engines' reaper returns its steps to the queue. The server
// keeps no state of its own about workers, so any number of servers on one
// PostgreSQL database serve the same workers.

var namePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$`)

// registerWorkerRequest is the body of POST /v1/workers.
type registerWorkerRequest struct {
	Name       string   `json:"name"`
	Namespaces []string `json:"namespaces"`
	Handlers   []string `json:"handlers"`
}

type registerWorkerResponse struct {
	WorkerID            string   `json:"worker_id"`
	Namespaces          []string `json:"namespaces"`
	Handlers            []string `json:"handlers"`
	LeaseTTLMS          int64    `json:"lease_ttl_ms"`
	HeartbeatIntervalMS int64    `json:"heartbeat_interval_ms"`
	MaxWaitMS           int64    `json:"max_wait_ms"`
}

func checkNames(field string, names []string, required bool) error {
	if required && len(names) == 0 {
		return fieldError(field, "must list at least one name")
	}
	if len(names) > 256 {
		return fieldError(field, "must list at most 256 names")
	}
	seen := map[string]bool{}
	for i, n := range names {
		if !namePattern.MatchString(n) {
			return fieldError(fmt.Sprintf("%s[%d]", field, i), "%q is not a valid name (letters, digits, '_', '.', '-')", n)
		}
		if seen[n] {
			return fieldError(fmt.Sprintf("%s[%d]", field, i), "%q is listed twice", n)
		}
		seen[n] = true
	}
	return nil
}

func (s *Server) registerWorker(r *http.Request) (int, any, error) {
	var req registerWorkerRequest
	if err := decode(r, &req); err != nil {
		return 0, nil, err
	}
	if !namePattern.MatchString(req.Name) {
		return 0, nil, fieldError("name", "is required: letters, digits, '_', '.', '-' (at most 128)")
	}
	if err := checkNames("handlers", req.Handlers, true); err != nil {
		return 0, nil, err
	}
	if err := checkNames("namespaces", req.Namespaces, false); err != nil {
		return 0, nil, err
	}
	var b [6]byte
	_, _ = crand.Read(b[:])
	id := "remote-" + req.Name + "-" + hex.EncodeToString(b[:])
	err := s.engine.Store().RegisterEngine(r.Context(), store.EngineInfo{ID: id, Host: "remote worker " + req.Name, StartedAt: time.Now()})
	if err != nil {
		return 0, nil, err
	}
	s.log.Info("remote worker registered", "worker_id", id, "handlers", strings.Join(req.Handlers, ","), "namespaces", strings.Join(req.Namespaces, ","))
	return http.StatusCreated, registerWorkerResponse{WorkerID: id, Namespaces: req.Namespaces, Handlers: req.Handlers,
		LeaseTTLMS: s.engine.LeaseTTL().Milliseconds(), HeartbeatIntervalMS: s.engine.HeartbeatInterval().Milliseconds(),
		MaxWaitMS: s.opts.MaxPoll.Milliseconds()}, nil
}

func (s *Server) deregisterWorker(r *http.Request) (int, any, error) {
	id := r.PathValue("id")
	if err := s.engine.Store().StopEngine(r.Context(), id); err != nil {
		return 0, nil, err
	}
	s.log.Info("remote worker stopped", "worker_id", id)
	return http.StatusNoContent, nil, nil
}

// claimRequest is the body of POST /v1/workers/{id}/claim.
type claimRequest struct {
	Handlers   []string `json:"handlers"`
	Namespaces []string `json:"namespaces"`
	Max        int      `json:"max"`
	WaitMS     int64    `json:"wait_ms"`
}

// fenceJSON is the fencing token of a claim: the attempt and lease it holds
// the step under. Every write about the step must carry it back.
type fenceJSON struct {
	StepID  int64 `json:"step_id"`
	Attempt int   `json:"attempt"`
	LeaseID int64 `json:"lease_id,string"`
}

func (f fenceJSON) fence() store.Fence {
	return store.Fence{StepID: f.StepID, Attempt: f.Attempt, LeaseID: f.LeaseID}
}

func (f *fenceJSON) check(field string) error {
	if f == nil {
		return fieldError(field, "is required: the fence the step was claimed with")
	}
	if f.StepID < 1 || f.Attempt < 1 || f.LeaseID == 0 {
		return fieldError(field, "must carry step_id, attempt and lease_id from the claim")
	}
	return nil
}

// claimedStepJSON is what a worker gets for each step it claimed.
type claimedStepJSON struct {
	StepID     int64                      `json:"step_id"`
	TaskID     int64                      `json:"task_id"`
	Namespace  string                     `json:"namespace"`
	Workflow   string                     `json:"workflow"`
	Version    string                     `json:"version"`
	Step       string                     `json:"step"`
	Handler    string                     `json:"handler"`
	Attempt    int                        `json:"attempt"`
	Input      json.RawMessage            `json:"input"`
	Deps       map[string]json.RawMessage `json:"deps"`
	Config     json.RawMessage            `json:"config,omitempty"`
	Checkpoint json.RawMessage            `json:"checkpoint,omitempty"`
	TimeoutMS  int64                      `json:"timeout_ms,omitempty"`
	Fence      fenceJSON                  `json:"fence"`
}

func (s *Server) claim(r *http.Request) (int, any, error) {
	id := r.PathValue("id")
	var req claimRequest
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
	if req.WaitMS < 0 || time.Duration(req.WaitMS)*time.Millisecond > s.opts.MaxPoll {
		return 0, nil, fieldError("wait_ms", "must be from 0 to %d, got %d", s.opts.MaxPoll.Milliseconds(), req.WaitMS)
	}
	ctx := r.Context()
	st := s.engine.Store()
	// A claim is a sign of life: it renews the worker's lease, and tells a
	// worker that was declared dead to register again.
	if _, err := st.Heartbeat(ctx, store.HeartbeatParams{EngineID: id, Now: time.Now()}); err != nil {
		return 0, nil, err
	}
	deadline := time.Now().Add(time.Duration(req.WaitMS) * time.Millisecond)
	var namespaces []string
	if len(req.Namespaces) > 0 {
		namespaces = req.Namespaces
	}
	fallback := time.NewTimer(0)
	defer fallback.Stop()
	beat := time.Now()
	for {
		// A worker waiting in a claim is alive: renew its lease while it
		// waits, as its own heartbeats would.
		if time.Since(beat) >= s.engine.HeartbeatInterval() {
			if _, err := st.Heartbeat(ctx, store.HeartbeatParams{EngineID: id, Now: time.Now()}); err != nil {
				return 0, nil, err
			}
			beat = time.Now()
		}
		woken := s.readySignal()
		lease := rand.Int64N(1<<62) + 1
		claimed, err := st.ClaimSteps(ctx, store.ClaimParams{EngineID: id, Limit: req.Max, Handlers: req.Handlers, Namespaces: namespaces, LeaseID: lease})
		if err != nil {
			if !errors.Is(err, store.ErrEngineLost) {
				s.release(id, lease)
			}
			return 0, nil, err
		}
		if len(claimed) > 0 {
			out, err := s.describeClaims(ctx, claimed)
			if err != nil || ctx.Err() != nil {
				// The worker will never see these steps: give them back now
				// rather than when its lease lapses.
				s.release(id, lease)
				return 0, nil, errors.Join(err, ctx.Err())
			}
			for _, c := range claimed {
				s.engine.Publish(weft.Event{Kind: weft.EventClaimed, Namespace: c.Namespace, Workflow: c.Workflow, TaskID: c.TaskID,
					Step: c.Name, Handler: c.Handler, Attempt: c.Attempts, Remote: true})
			}
			return http.StatusOK, map[string]any{"steps": out}, nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			return http.StatusOK, map[string]any{"steps": []claimedStepJSON{}}, nil
		}
		fallback.Reset(min(left, s.opts.PollFallback, s.engine.HeartbeatInterval()))
		select {
		case <-ctx.Done():
			return 0, nil, ctx.Err()
		case <-woken:
		case <-fallback.C:
		}
	}
}

// release returns the steps of a claim the worker will not get.
func (s *Server) release(workerID string, lease int64) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if n, err := s.engine.Store().ReleaseLease(ctx, workerID, lease); err != nil {
		s.log.Error("release an undelivered claim", "worker_id", workerID, "error", err)
	} else if n > 0 {
		s.log.Warn("released steps of an undelivered claim", "worker_id", workerID, "count", n)
	}
}

func (s *Server) describeClaims(ctx context.Context, claimed []store.ClaimedStep) ([]claimedStepJSON, error) {
	out := make([]claimedStepJSON, len(claimed))
	for i, c := range claimed {
		j := claimedStepJSON{StepID: c.ID, TaskID: c.TaskID, Namespace: c.Namespace, Workflow: c.Workflow, Version: c.Version,
			Step: c.Name, Handler: c.Handler, Attempt: c.Attempts, Input: c.Input, Deps: c.Deps, Checkpoint: rawJSON(c.Checkpoint),
			Fence: fenceJSON{StepID: c.Fence.StepID, Attempt: c.Fence.Attempt, LeaseID: c.Fence.LeaseID}}
		if j.Deps == nil {
			j.Deps = map[string]json.RawMessage{}
		}
		def, err := s.engine.StepDefinition(ctx, c)
		if err != nil {
			return nil, err
		}
		j.Config, j.TimeoutMS = rawJSON(def.Config), time.Duration(def.Timeout).Milliseconds()
		out[i] = j
	}
	return out, nil
}

// heartbeatRequest is the body of POST /v1/workers/{id}/heartbeat.
type heartbeatRequest struct {
	Steps []fenceJSON `json:"steps"`
}

func (s *Server) heartbeat(r *http.Request) (int, any, error) {
	id := r.PathValue("id")
	var req heartbeatRequest
	if err := decode(r, &req); err != nil {
		return 0, nil, err
	}
	if len(req.Steps) > 10000 {
		return 0, nil, fieldError("steps", "must list at most 10000 fences")
	}
	fences := make([]store.Fence, len(req.Steps))
	for i, f := range req.Steps {
		if err := f.check(fmt.Sprintf("steps[%d]", i)); err != nil {
			return 0, nil, err
		}
		fences[i] = f.fence()
	}
	hb, err := s.engine.Store().Heartbeat(r.Context(), store.HeartbeatParams{EngineID: id, Now: time.Now(), Held: fences})
	lost := hb.Lost
	if err != nil {
		return 0, nil, err
	}
	out := make([]fenceJSON, len(lost))
	for i, f := range lost {
		out[i] = fenceJSON{StepID: f.StepID, Attempt: f.Attempt, LeaseID: f.LeaseID}
	}
	return http.StatusOK, map[string]any{"lost": out}, nil
}

// heldStep loads a step a worker reports on and checks that the worker holds
// it under the fence's attempt.
func (s *Server) heldStep(ctx context.Context, workerID string, f fenceJSON) (*store.Step, error) {
	st, err := s.engine.Store().GetStep(ctx, f.StepID)
	if err != nil {
		return nil, err
	}
	if st.State != state.StepRunning || st.EngineID != workerID || st.Attempts != f.Attempt {
		return nil, fmt.Errorf("step %d attempt %d is not held by worker %s: %w", f.StepID, f.Attempt, workerID, store.ErrStaleLease)
	}
	return st, nil
}

// held is heldStep with the step's workflow version, as the claim described
// it: what an outcome and its event need.
func (s *Server) held(ctx context.Context, workerID string, f fenceJSON) (store.ClaimedStep, error) {
	st, err := s.heldStep(ctx, workerID, f)
	if err != nil {
		return store.ClaimedStep{}, err
	}
	c := store.ClaimedStep{Step: *st, Fence: f.fence()}
	task, err := s.engine.Get(ctx, st.TaskID)
	if err != nil {
		return store.ClaimedStep{}, err
	}
	c.Workflow, c.Version = task.Workflow, task.Version
	return c, nil
}

// record writes one outcome of a worker's step and publishes its end.
func (s *Server) record(ctx context.Context, c store.ClaimedStep, o store.Outcome) (int, any, error) {
	results, err := s.engine.Store().CompleteSteps(ctx, []store.Outcome{o})
	if err != nil {
		return 0, nil, err
	}
	if results[0] != nil {
		return 0, nil, results[0]
	}
	var d time.Duration
	if c.StartedAt != nil {
		d = time.Since(*c.StartedAt)
	}
	s.engine.Publish(weft.Event{Kind: weft.EventStepEnded, Namespace: c.Namespace, Workflow: c.Workflow, TaskID: c.TaskID, Step: c.Name,
		Handler: c.Handler, Attempt: c.Attempts, Outcome: weft.OutcomeName(o), Duration: d, Remote: true})
	body := map[string]any{"state": o.State}
	if o.State == state.StepWaiting {
		body["retry_at"] = o.RunAt
	}
	return http.StatusOK, body, nil
}

// completeRequest is the body of POST /v1/workers/{id}/complete.
type completeRequest struct {
	Fence  *fenceJSON      `json:"fence"`
	Result json.RawMessage `json:"result"`
}

func (s *Server) workerComplete(r *http.Request) (int, any, error) {
	var req completeRequest
	if err := decode(r, &req); err != nil {
		return 0, nil, err
	}
	if err := req.Fence.check("fence"); err != nil {
		return 0, nil, err
	}
	c, err := s.held(r.Context(), r.PathValue("id"), *req.Fence)
	if err != nil {
		return 0, nil, err
	}
	// As for the engine's own handlers: a decision's result decides, a
	// batch's makes its items.
	o, err := s.engine.CompletionOutcome(r.Context(), c, req.Result, r.PathValue("id"))
	if errors.Is(err, weft.ErrInvalid) {
		return 0, nil, fieldError("result", "must be JSON")
	}
	if err != nil {
		return 0, nil, err
	}
	return s.record(r.Context(), c, o)
}

// failRequest is the body of POST /v1/workers/{id}/fail.
type failRequest struct {
	Fence        *fenceJSON `json:"fence"`
	Error        string     `json:"error"`
	Permanent    bool       `json:"permanent"`
	RetryAfterMS int64      `json:"retry_after_ms"`
}

func (s *Server) workerFail(r *http.Request) (int, any, error) {
	var req failRequest
	if err := decode(r, &req); err != nil {
		return 0, nil, err
	}
	if err := req.Fence.check("fence"); err != nil {
		return 0, nil, err
	}
	if req.Error == "" {
		return 0, nil, fieldError("error", "is required: what went wrong")
	}
	if len(req.Error) > 64<<10 {
		req.Error = req.Error[:64<<10]
	}
	if req.RetryAfterMS < 0 || req.RetryAfterMS > int64(7*24*time.Hour/time.Millisecond) {
		return 0, nil, fieldError("retry_after_ms", "must be from 0 to a week")
	}
	c, err := s.held(r.Context(), r.PathValue("id"), *req.Fence)
	if err != nil {
		return 0, nil, err
	}
	o, err := s.engine.FailureOutcome(r.Context(), c, weft.Failure{Message: req.Error, Permanent: req.Permanent,
		RetryAfter: time.Duration(req.RetryAfterMS) * time.Millisecond}, r.PathValue("id"))
	if err != nil {
		return 0, nil, err
	}
	return s.record(r.Context(), c, o)
}

// checkpointRequest is the body of POST /v1/workers/{id}/checkpoint.
type checkpointRequest struct {
	Fence      *fenceJSON      `json:"fence"`
	Checkpoint json.RawMessage `json:"checkpoint"`
}

func (s *Server) workerCheckpoint(r *http.Request) (int, any, error) {
	var req checkpointRequest
	if err := decode(r, &req); err != nil {
		return 0, nil, err
	}
	if err := req.Fence.check("fence"); err != nil {
		return 0, nil, err
	}
	if len(req.Checkpoint) == 0 {
		return 0, nil, fieldError("checkpoint", "is required")
	}
	if _, err := s.heldStep(r.Context(), r.PathValue("id"), *req.Fence); err != nil {
		return 0, nil, err
	}
	if err := s.engine.Store().SaveCheckpoint(r.Context(), req.Fence.fence(), req.Checkpoint); err != nil {
		return 0, nil, err
	}
	return http.StatusNoContent, nil, nil
}
