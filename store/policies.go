package store

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/weftrun/weft/internal/ident"
)

// Policies holds the scheduling policies an operator sets at run time:
// pauses, namespace concurrency limits, namespace weights (fair shares) and
// rates. They live in the database, so they hold for every engine and
// remote worker on it and survive restarts; ClaimSteps applies them as
// predicates of its one query.
type Policies interface {
	// SetPolicy applies a change to one target and records it, with its
	// actor, in the policy audit, in one transaction. It returns the
	// target's policy as it now stands. A change that sets nothing is an
	// error.
	SetPolicy(ctx context.Context, c PolicyChange) (Policy, error)
	// ListPolicies returns every target with a policy set, with its current
	// usage, and the usage of every concurrency limit that workflows
	// define and that has steps or tasks running.
	ListPolicies(ctx context.Context) (PolicyReport, error)
	// PolicyChanges returns the most recent policy changes, newest first,
	// at most limit of them (100 when limit is 0).
	PolicyChanges(ctx context.Context, limit int) ([]PolicyChangeRecord, error)
	// PruneRates forgets the rate buckets that are full at now and have
	// no deferred step still to wake (a missing bucket is a full one), so
	// that keyed rates do not grow without bound. It returns how many it
	// forgot.
	PruneRates(ctx context.Context, now time.Time) (int, error)
}

// TargetAll is the target that stands for all work.
const TargetAll = "*"

// ParseTarget checks a policy target: TargetAll, a namespace ("shop") or a
// workflow ("shop/checkout"), and returns its namespace and workflow name
// ("" for a namespace; both "" for TargetAll).
func ParseTarget(target string) (namespace, name string, err error) {
	if target == TargetAll {
		return "", "", nil
	}
	ns, name, hasName := strings.Cut(target, "/")
	switch {
	case target == "":
		return "", "", Invalidf("target", "empty; want NAMESPACE, NAMESPACE/WORKFLOW or %q", TargetAll)
	case ns == "" || (hasName && name == "") || strings.Contains(name, "/") || strings.Contains(target, "@"):
		return "", "", Invalidf("target", "%q: want NAMESPACE, NAMESPACE/WORKFLOW or %q (no version)", target, TargetAll)
	case len(target) > 200:
		return "", "", Invalidf("target", "%q: longer than 200 bytes", target[:40]+"…")
	case !ident.Valid(ns) || (hasName && !ident.Valid(name)):
		return "", "", Invalidf("target", "%q: a name holds %s", target, ident.Rule)
	}
	return ns, name, nil
}

// PolicyChange is one operator change of a target's policy. Nil fields are
// left as they are.
type PolicyChange struct {
	Target string
	// Paused pauses (true) or resumes (false) the target.
	Paused *bool
	// Concurrency bounds how many steps of a namespace run at once across
	// every engine and remote worker; 0 removes the limit. Only a
	// namespace takes one.
	Concurrency *int
	// Weight is the namespace's share of the claims while several
	// namespaces have ready work and slots are scarce, from 1 to MaxWeight;
	// namespaces without one weigh 1, and 0 (or 1) sets the default back.
	// Only a namespace takes one.
	Weight *int
	// Rate bounds how often steps of a namespace are claimed across every
	// engine and remote worker; the zero Rate removes the bound. Only a
	// namespace takes one (steps set theirs in their template).
	Rate *Rate
	// Actor names who made the change, Reason why; both are audited.
	Actor  string
	Reason string
	// At is when; zero means the store's clock.
	At time.Time
}

// Validate checks a change before it reaches the database.
func (c PolicyChange) Validate() error {
	ns, name, err := ParseTarget(c.Target)
	if err != nil {
		return err
	}
	if c.Paused == nil && c.Concurrency == nil && c.Weight == nil && c.Rate == nil {
		return fmt.Errorf("%w policy change of %q sets nothing", ErrInvalid, c.Target)
	}
	if c.Concurrency != nil {
		if ns == "" || name != "" {
			return Invalidf("concurrency", "of %q: a concurrency limit is set on a namespace (workflows and steps set theirs in their template)", c.Target)
		}
		if err := CheckConcurrency(*c.Concurrency); err != nil {
			return fmt.Errorf("policy of %q: %w", c.Target, err)
		}
	}
	if c.Weight != nil {
		if ns == "" || name != "" {
			return Invalidf("weight", "of %q: a weight is set on a namespace", c.Target)
		}
		if err := CheckWeight(*c.Weight); err != nil {
			return fmt.Errorf("policy of %q: %w", c.Target, err)
		}
	}
	if c.Rate != nil {
		if ns == "" || name != "" {
			return Invalidf("rate", "of %q: a rate limit is set on a namespace (steps set theirs in their template)", c.Target)
		}
		if err := c.Rate.Validate(); err != nil {
			return fmt.Errorf("rate of %q: %w", c.Target, err)
		}
	}
	if c.Actor == "" {
		return Invalidf("actor", "the policy change of %q needs one for the audit", c.Target)
	}
	return CheckReason(c.Reason)
}

// MaxWeight is the largest namespace weight.
const MaxWeight = 1000

// MaxConcurrency is the largest namespace concurrency limit: the most both
// stores hold (PostgreSQL keeps it in an integer column).
const MaxConcurrency = math.MaxInt32

// CheckConcurrency checks a namespace's concurrency limit (0: none). Every
// way of setting one (the Go API, REST, the CLI) checks it here.
func CheckConcurrency(n int) error {
	if n < 0 || n > MaxConcurrency {
		return Invalidf("concurrency", "must be 0 (no limit) or more, at most %d, got %d", MaxConcurrency, n)
	}
	return nil
}

// CheckWeight checks a namespace's weight (0 or 1: the default).
func CheckWeight(n int) error {
	if n < 0 || n > MaxWeight {
		return Invalidf("weight", "must be from 1 to %d (0 or 1: the default), got %d", MaxWeight, n)
	}
	return nil
}

// Describe says what the change does, for the audit: "pause",
// "concurrency=4", "weight=3", "rate=50/s", joined by spaces.
func (c PolicyChange) Describe() string {
	var parts []string
	if c.Paused != nil {
		if *c.Paused {
			parts = append(parts, "pause")
		} else {
			parts = append(parts, "resume")
		}
	}
	if c.Concurrency != nil {
		parts = append(parts, fmt.Sprintf("concurrency=%d", *c.Concurrency))
	}
	if c.Weight != nil {
		w := *c.Weight
		if w == 0 {
			w = 1 // the default, as stored
		}
		parts = append(parts, fmt.Sprintf("weight=%d", w))
	}
	if c.Rate != nil {
		parts = append(parts, "rate="+c.Rate.String())
	}
	return strings.Join(parts, " ")
}

// Policy is what is set on one target.
type Policy struct {
	Target      string
	Paused      bool
	Concurrency int
	// Weight is a namespace's weight in the fair shares; 0 means the
	// default of 1.
	Weight    int
	UpdatedAt time.Time
	UpdatedBy string
	// Running is, for a namespace, how many of its steps run now.
	Running int
	// Rate is a namespace's rate limit (nil: none) and Tokens how many
	// claims its bucket allows now, besides those of the tokens engines
	// hold reserved (rates of 1,000 a period or more).
	Rate   *Rate
	Tokens *float64
}

// LimitUsage is a concurrency limit a workflow template defines, for one
// key, with how much of it is used now.
type LimitUsage struct {
	// Key names the limit: "step:NS/WORKFLOW/STEP" or "workflow:NS/WORKFLOW",
	// followed by "=VALUE" for a keyed limit.
	Key     string
	Limit   int
	Running int
}

// PolicyReport is every policy set and the usage of the limits in force.
type PolicyReport struct {
	Policies []Policy
	Limits   []LimitUsage
	// Rates are the token buckets of the rate limits workflow templates
	// define, one per key that has been used (namespace rates are in
	// Policies).
	Rates []RateUsage
	// Breakers are the circuit breakers of steps that failed since they
	// were last reset (see Breakers).
	Breakers []Breaker
}

// PolicyChangeRecord is one audited policy change.
type PolicyChangeRecord struct {
	ID     int64
	At     time.Time
	Actor  string
	Target string
	Change string
	Reason string
}
