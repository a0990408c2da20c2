package client

import (
	"context"
	"strconv"

	"github.com/weftrun/weft/wire"
)

// Policies returns every scheduling policy set on the server's database,
// with current usage, and the usage of the concurrency limits workflow
// templates define.
func (c *Client) Policies(ctx context.Context) (wire.PolicyReport, error) {
	var out wire.PolicyReport
	_, err := c.do(ctx, "GET", "/v1/policies", nil, &out)
	return out, err
}

// ChangePolicy changes one target's policy (see wire.PolicyChange); the
// change is audited with the client's credential.
func (c *Client) ChangePolicy(ctx context.Context, ch wire.PolicyChange) (wire.Policy, error) {
	var out wire.Policy
	_, err := c.do(ctx, "POST", "/v1/policies", ch, &out)
	return out, err
}

// Pause stops claims of target's steps: "*" for all work, a namespace, or
// "namespace/workflow".
func (c *Client) Pause(ctx context.Context, target, reason string) (wire.Policy, error) {
	paused := true
	return c.ChangePolicy(ctx, wire.PolicyChange{Target: target, Paused: &paused, Reason: reason})
}

// Resume lets target's steps be claimed again.
func (c *Client) Resume(ctx context.Context, target, reason string) (wire.Policy, error) {
	paused := false
	return c.ChangePolicy(ctx, wire.PolicyChange{Target: target, Paused: &paused, Reason: reason})
}

// SetConcurrency bounds how many steps of a namespace run at once across
// every engine and remote worker; 0 removes the bound.
func (c *Client) SetConcurrency(ctx context.Context, namespace string, n int, reason string) (wire.Policy, error) {
	return c.ChangePolicy(ctx, wire.PolicyChange{Target: namespace, Concurrency: &n, Reason: reason})
}

// SetWeight sets a namespace's weight in the fair shares (1 to 1000; 0
// or 1 sets the default of 1 back).
func (c *Client) SetWeight(ctx context.Context, namespace string, weight int, reason string) (wire.Policy, error) {
	return c.ChangePolicy(ctx, wire.PolicyChange{Target: namespace, Weight: &weight, Reason: reason})
}

// SetRate bounds how often steps of a namespace are claimed across every
// engine and remote worker: rate is "LIMIT/PER" ("50/s", "100/m", "5/10s"),
// or "off" to remove the bound.
func (c *Client) SetRate(ctx context.Context, namespace, rate, reason string) (wire.Policy, error) {
	return c.ChangePolicy(ctx, wire.PolicyChange{Target: namespace, Rate: &rate, Reason: reason})
}

// PolicyChanges returns the latest policy changes, newest first (limit 0:
// the server's default of 100).
func (c *Client) PolicyChanges(ctx context.Context, limit int) ([]wire.PolicyChangeRecord, error) {
	path := "/v1/policies/changes"
	if limit > 0 {
		path += "?limit=" + strconv.Itoa(limit)
	}
	var out wire.PolicyChanges
	_, err := c.do(ctx, "GET", path, nil, &out)
	return out.Changes, err
}
