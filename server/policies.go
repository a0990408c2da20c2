package server

import (
	"net/http"
	"strconv"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/wire"
)

// The scheduling policies: listing them with their usage, changing one
// target's, and the audit of changes. The engine validates and records;
// these handlers translate.

func (s *Server) listPolicies(r *http.Request) (int, any, error) {
	rep, err := s.engine.Policies(r.Context())
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, wire.PolicyReportOf(VisiblePolicies(requestScope(r), rep)), nil
}

func (s *Server) changePolicy(r *http.Request) (int, any, error) {
	var req wire.PolicyChange
	if err := decode(r, &req); err != nil {
		return 0, nil, err
	}
	switch {
	case req.Target == "":
		return 0, nil, fieldError("target", "is required: a namespace, namespace/workflow or \"*\" for all work")
	case req.Paused == nil && req.Concurrency == nil && req.Weight == nil && req.Rate == nil:
		return 0, nil, fieldError("paused", "the change sets nothing: give paused, concurrency, weight, rate or several")
	}
	if req.Concurrency != nil {
		if err := store.CheckConcurrency(*req.Concurrency); err != nil {
			return 0, nil, err
		}
	}
	if req.Weight != nil {
		if err := store.CheckWeight(*req.Weight); err != nil {
			return 0, nil, err
		}
	}
	rate, err := policyRate(req.Rate)
	if err != nil {
		return 0, nil, err
	}
	if err := checkReason(req.Reason); err != nil {
		return 0, nil, err
	}
	if err := checkScope(r.Context(), "target", targetNamespace(req.Target)); err != nil {
		return 0, nil, err
	}
	op := weft.Operator{Actor: operator(r.Context()), Reason: req.Reason}
	var p weft.Policy
	if req.Concurrency != nil || req.Weight != nil || rate != nil {
		if p, err = s.engine.SetLimits(r.Context(), req.Target, weft.Limits{Concurrency: req.Concurrency, Weight: req.Weight, Rate: rate}, op); err != nil {
			return 0, nil, err
		}
	}
	switch {
	case req.Paused != nil && *req.Paused:
		p, err = s.engine.Pause(r.Context(), req.Target, op)
	case req.Paused != nil:
		p, err = s.engine.Resume(r.Context(), req.Target, op)
	}
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, wire.PolicyOf(p), nil
}

func (s *Server) policyChanges(r *http.Request) (int, any, error) {
	q := r.URL.Query()
	limit := 100
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return 0, nil, fieldError("limit", "must be an integer from 1 to 1000, got %q", v)
		}
		limit = n
	}
	changes, err := s.engine.PolicyChanges(r.Context(), limit)
	if err != nil {
		return 0, nil, err
	}
	changes = VisiblePolicyChanges(requestScope(r), changes)
	if changes == nil {
		changes = []weft.PolicyChangeRecord{}
	}
	return http.StatusOK, wire.PolicyChanges{Changes: wire.List(changes, wire.PolicyChangeRecordOf)}, nil
}

// policyRate reads the rate of a policy change (nil: left as it is).
func policyRate(v *string) (*weft.Rate, error) {
	if v == nil {
		return nil, nil
	}
	rate, err := weft.ParseRate(*v)
	if err != nil {
		return nil, inField("rate", err)
	}
	return &rate, nil
}
