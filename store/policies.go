package store

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Policies holds the scheduling policies an operator sets at run time:
// pauses and namespace concurrency limits. They live in the database, so
// they hold for every engine and remote worker on it and survive restarts;
// ClaimSteps applies them as predicates of its one query.
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
		return "", "", fmt.Errorf("policy target is empty: want NAMESPACE, NAMESPACE/WORKFLOW or %q", TargetAll)
	case ns == "" || (hasName && name == "") || strings.Contains(name, "/") || strings.Contains(target, "@"):
		return "", "", fmt.Errorf("policy target %q: want NAMESPACE, NAMESPACE/WORKFLOW or %q (no version)", target, TargetAll)
	case strings.ContainsAny(target, " \t\r\n,*"):
		return "", "", fmt.Errorf("policy target %q: must not contain spaces, commas or *", target)
	case len(target) > 200:
		return "", "", fmt.Errorf("policy target %q: longer than 200 bytes", target[:40]+"…")
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
	if c.Paused == nil && c.Concurrency == nil {
		return fmt.Errorf("policy change of %q sets nothing", c.Target)
	}
	if c.Concurrency != nil {
		if ns == "" || name != "" {
			return fmt.Errorf("concurrency of %q: a concurrency limit is set on a namespace (workflows and steps set theirs in their template)", c.Target)
		}
		if *c.Concurrency < 0 {
			return fmt.Errorf("concurrency of %q: must be 0 (no limit) or more, got %d", c.Target, *c.Concurrency)
		}
	}
	if c.Actor == "" {
		return fmt.Errorf("policy change of %q: the actor is required for the audit", c.Target)
	}
	if len(c.Reason) > 4096 {
		return fmt.Errorf("policy change of %q: reason is longer than 4096 bytes", c.Target)
	}
	return nil
}

// Describe says what the change does, for the audit: "pause",
// "concurrency=4", joined by spaces.
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
	return strings.Join(parts, " ")
}

// Policy is what is set on one target.
type Policy struct {
	Target      string    `json:"target"`
	Paused      bool      `json:"paused"`
	Concurrency int       `json:"concurrency,omitempty"`
	UpdatedAt   time.Time `json:"updated_at"`
	UpdatedBy   string    `json:"updated_by"`
	// Running is, for a namespace, how many of its steps run now.
	Running int `json:"running"`
}

// LimitUsage is a concurrency limit a workflow template defines, for one
// key, with how much of it is used now.
type LimitUsage struct {
	// Key names the limit: "step:NS/WORKFLOW/STEP" or "workflow:NS/WORKFLOW",
	// followed by "=VALUE" for a keyed limit.
	Key     string `json:"key"`
	Limit   int    `json:"limit"`
	Running int    `json:"running"`
}

// PolicyReport is every policy set and the usage of the limits in force.
type PolicyReport struct {
	Policies []Policy     `json:"policies"`
	Limits   []LimitUsage `json:"limits"`
}

// PolicyChangeRecord is one audited policy change.
type PolicyChangeRecord struct {
	ID     int64     `json:"id"`
	At     time.Time `json:"at"`
	Actor  string    `json:"actor"`
	Target string    `json:"target"`
	Change string    `json:"change"`
	Reason string    `json:"reason,omitempty"`
}
