package weft

import (
	"context"

	"github.com/weftrun/weft/store"
)

// Scheduling policies an operator sets at run time. They are held in the
// database, so they hold for every engine and remote worker on it, survive
// restarts and take effect at the next claim; every change is recorded with
// who made it (PolicyChanges).
type (
	// Policy is what is set on one target, with its usage.
	Policy = store.Policy
	// PolicyReport lists every policy set and the usage of the concurrency
	// limits that workflows define.
	PolicyReport = store.PolicyReport
	// LimitUsage is one concurrency limit of a workflow template, by key.
	LimitUsage = store.LimitUsage
	// PolicyChangeRecord is one audited change.
	PolicyChangeRecord = store.PolicyChangeRecord
	// Rate is a rate limit: at most Limit claims per Per, in bursts of up
	// to Limit ("50/s"; see ParseRate).
	Rate = store.Rate
	// RateUsage is one token bucket of a rate limit, as it stands now.
	RateUsage = store.RateUsage
)

// ParseRate reads a rate: "LIMIT/PER" with PER s, m, h or a duration
// ("50/s", "100/m", "5/10s"), or "0" or "off" for none.
func ParseRate(s string) (Rate, error) { return store.ParseRate(s) }

// AllTargets is the policy target that stands for all work ("weft pause
// --all").
const AllTargets = store.TargetAll

// Limits are the limits an operator sets on a namespace. Nil fields are left
// as they are.
type Limits struct {
	// Concurrency bounds how many steps of the namespace run at once across
	// every engine and remote worker; 0 removes the bound.
	Concurrency *int
	// Weight is the namespace's share of the claims while several
	// namespaces have ready work and slots are scarce: with weights 3 and
	// 1, three steps of the first start for one of the second. From 1 to
	// 1000; namespaces without a weight weigh 1, and 0 or 1 sets the
	// default back. Priority and aging still order the steps inside a
	// namespace.
	Weight *int
	// Rate bounds how often steps of the namespace are claimed across
	// every engine and remote worker; the zero Rate removes the bound.
	Rate *Rate
}

// Pause stops the claims of target's steps on every engine and remote
// worker: a namespace ("shop"), a workflow ("shop/checkout") or AllTargets.
// Work is still submitted; steps already running finish. A claim in flight
// as the pause commits may still start its steps.
func (e *Engine) Pause(ctx context.Context, target string, op Operator) (Policy, error) {
	paused := true
	return e.core.Admin().SetPolicy(ctx, store.PolicyChange{Target: target, Paused: &paused, Actor: op.Actor, Reason: op.Reason})
}

// Resume lets target's steps be claimed again. Resuming a target that is
// not paused changes nothing but is recorded.
func (e *Engine) Resume(ctx context.Context, target string, op Operator) (Policy, error) {
	paused := false
	return e.core.Admin().SetPolicy(ctx, store.PolicyChange{Target: target, Paused: &paused, Actor: op.Actor, Reason: op.Reason})
}

// SetLimits sets the limits of a namespace, in one audited change.
func (e *Engine) SetLimits(ctx context.Context, namespace string, l Limits, op Operator) (Policy, error) {
	return e.core.Admin().SetPolicy(ctx, store.PolicyChange{Target: namespace, Concurrency: l.Concurrency, Weight: l.Weight, Rate: l.Rate, Actor: op.Actor, Reason: op.Reason})
}

// Policies returns every policy set, with current usage, and the usage of
// the concurrency limits workflow templates define.
func (e *Engine) Policies(ctx context.Context) (PolicyReport, error) {
	return e.core.Admin().Policies(ctx)
}

// PolicyChanges returns the latest policy changes, newest first (at most
// limit; 0 means 100).
func (e *Engine) PolicyChanges(ctx context.Context, limit int) ([]PolicyChangeRecord, error) {
	return e.core.Admin().PolicyChanges(ctx, limit)
}
