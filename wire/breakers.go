package wire

import "github.com/weftrun/weft/store"

// Breaker is the state of one circuit breaker of a step, as listed in
// PolicyReport.Breakers and returned by POST /v1/breakers/reset.
type Breaker = store.Breaker

// BreakerReset is the body of POST /v1/breakers/reset: the breaker to close
// ("namespace/workflow/step") and why; the reset is audited with the
// acting credential and Reason.
type BreakerReset struct {
	Key    string `json:"key"`
	Reason string `json:"reason,omitempty"`
}
