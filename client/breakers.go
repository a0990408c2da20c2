package client

import (
	"context"

	"github.com/weftrun/weft/wire"
)

// ResetBreaker closes the circuit breaker key ("namespace/workflow/step")
// and forgets its count, so its held steps are claimed again; the reset is
// audited with the client's credential and reason. Policies lists the
// breakers.
func (c *Client) ResetBreaker(ctx context.Context, key, reason string) (wire.Breaker, error) {
	var out wire.Breaker
	_, err := c.do(ctx, "POST", "/v1/breakers/reset", wire.BreakerReset{Key: key, Reason: reason}, &out)
	return out, err
}
