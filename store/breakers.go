package store

import (
	"context"
	"strings"
	"time"
)

// Breakers holds the circuit breakers of steps. A step with a breaker
// (StepInsert.Breaker) counts its consecutive failed attempts across tasks
// under its key; at the threshold the breaker opens and the claim holds
// every step under that key (they stay ready, no attempt used) until the
// cooldown passes. Then exactly one of them is claimed as a probe
// (half-open): its success closes the breaker, its failure opens it again
// for a fresh cooldown. A success of any step under the key closes it too.
//
// Counting happens in the transaction that records the outcome
// (CompleteSteps): a failure for good and a failed attempt to be retried
// count; a lease that lapsed (Reap) does not, its engine died, not the
// step. The claim reads the breakers that are not closed with the other
// policies, again only when the policy version moved.
//
// A probe that ends without an outcome of its own gives its place back: a
// probe released, snoozed or whose engine died reopens the breaker with
// its cooldown already passed, so the next claim probes again; a probe that
// stops running any other way (its task cancelled) lets another probe be
// claimed one cooldown after it was claimed.
type Breakers interface {
	// ListBreakers returns every breaker that has failed since it was last
	// reset, closed ones included, by key.
	ListBreakers(ctx context.Context) ([]Breaker, error)
	// ResetBreaker closes a breaker and clears its count, and records the
	// change, with its actor, in the policy audit. An unknown key is
	// ErrNotFound.
	ResetBreaker(ctx context.Context, r BreakerReset) (Breaker, error)
}

// The states of a breaker.
const (
	BreakerClosed   = "closed"
	BreakerOpen     = "open"
	BreakerHalfOpen = "half-open"
)

// BreakerAuditPrefix marks the audit entries of a breaker's transitions:
// their from and to states are the breaker's, after this prefix, and the
// entry belongs to the step whose outcome (or claim, for a probe) moved it.
// The history calls them "breaker.opened", "breaker.probing" and
// "breaker.closed" (see EventType).
const BreakerAuditPrefix = "breaker:"

// Bounds of a breaker's settings.
const (
	// MaxBreakerFailures bounds the failures that open a breaker.
	MaxBreakerFailures = 1_000_000
	// MaxBreakerCooldown bounds how long an open breaker holds its steps.
	MaxBreakerCooldown = 7 * 24 * time.Hour
)

// BreakerSpec is the circuit breaker of a step: after Failures consecutive
// failed attempts under Key, its steps are held for Cooldown.
type BreakerSpec struct {
	Key      string
	Failures int
	Cooldown time.Duration
}

// Validate checks a breaker's settings.
func (b BreakerSpec) Validate() error {
	switch {
	case b.Key == "":
		return Invalidf("circuit_breaker", "the key is required")
	case len(b.Key) > 400:
		return Invalidf("circuit_breaker", "%q: key longer than 400 bytes", b.Key[:40]+"…")
	case b.Failures < 1 || b.Failures > MaxBreakerFailures:
		return Invalidf("circuit_breaker", "%q: failures must be 1 to %d, got %d", b.Key, MaxBreakerFailures, b.Failures)
	case b.Cooldown < time.Millisecond || b.Cooldown > MaxBreakerCooldown:
		return Invalidf("circuit_breaker", "%q: cooldown must be 1ms to %s, got %s", b.Key, MaxBreakerCooldown, b.Cooldown)
	}
	return nil
}

// Breaker is the state of one circuit breaker.
type Breaker struct {
	// Key names the breaker: "NAMESPACE/WORKFLOW/STEP".
	Key string
	// State is BreakerClosed, BreakerOpen or BreakerHalfOpen.
	State string
	// Failures counts the consecutive failed attempts; Threshold is how
	// many open the breaker, Cooldown how long it then holds its steps.
	Failures  int
	Threshold int
	Cooldown  time.Duration
	// OpenedAt is when it last opened (nil while closed).
	OpenedAt *time.Time
	// ProbeAt is when the running probe was claimed, ProbeStepID which step
	// it is (half-open only).
	ProbeAt     *time.Time
	ProbeStepID int64
	// RetryAt is when a probe may be claimed (nil while closed).
	RetryAt   *time.Time
	UpdatedAt time.Time
}

// BreakerReset is an operator's reset of one breaker.
type BreakerReset struct {
	Key string
	// Actor names who reset it, Reason why; both are audited.
	Actor  string
	Reason string
	// At is when; zero means the store's clock.
	At time.Time
}

// Validate checks a reset before it reaches the database.
func (r BreakerReset) Validate() error {
	parts := strings.Split(r.Key, "/")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" || len(r.Key) > 400 {
		return Invalidf("key", "%q: want NAMESPACE/WORKFLOW/STEP", r.Key)
	}
	if r.Actor == "" {
		return Invalidf("actor", "the reset of breaker %q needs one for the audit", r.Key)
	}
	return CheckReason(r.Reason)
}
