package server

import (
	"net/http"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/wire"
)

// The circuit breakers of steps: GET /v1/policies lists them; an operator
// resets one here. The engine validates and records; this handler
// translates.

func (s *Server) resetBreaker(r *http.Request) (int, any, error) {
	var req wire.BreakerReset
	if err := decode(r, &req); err != nil {
		return 0, nil, err
	}
	if req.Key == "" {
		return 0, nil, fieldError("key", "is required: the breaker's namespace/workflow/step")
	}
	if err := checkReason(req.Reason); err != nil {
		return 0, nil, err
	}
	if err := checkScope(r.Context(), "key", targetNamespace(req.Key)); err != nil {
		return 0, nil, err
	}
	b, err := s.engine.ResetBreaker(r.Context(), req.Key, weft.Operator{Actor: operator(r.Context()), Reason: req.Reason})
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, wire.BreakerOf(b), nil
}
