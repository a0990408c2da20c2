package wire

// BreakerReset is the body of POST /v1/breakers/reset: the breaker to close
// ("namespace/workflow/step") and why; the reset is audited with the
// acting credential and Reason.
type BreakerReset struct {
	Key    string `json:"key"`
	Reason string `json:"reason,omitempty"`
}
