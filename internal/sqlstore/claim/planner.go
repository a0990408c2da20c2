// Package claim is claim planning: the Planner a store's handle keeps
// between claims, and the claim in a write transaction (ClaimTx, claimtx.go)
// that picks ready steps (claim.go), gates them (claimgate.go), claims them
// in one statement (claimstmt.go) and marks them running (claimed.go). The
// query of candidates is composed from the scheduling policies, each a
// candidatePolicy (claimpolicy.go): pauses (policies.go), concurrency and
// keyed limits (limits.go, limitbounds.go), breakers (breakerclaim.go);
// rates and reservations (rates.go, reserves.go), fair shares (fair.go) and
// preemption (preemption.go) act in the claim's statements. A new policy is
// a file here with its type in candidatePolicies.
package claim

import (
	"sync"
	"sync/atomic"

	"github.com/weftrun/weft/internal/sqlstore/sqltx"
)

// Planner is what a handle's claims keep between them: the policies last
// read, the passes of the fair shares, the namespaces last met under limits
// and their bounds, the rate tokens held ahead and the texts of the claim
// statements built. A claim in a transaction (ClaimTx) reads and updates it.
type Planner struct {
	Dialect sqltx.Dialect
	// policyMu guards policyCache: the policies as of a policy version,
	// read again by a claim that sees another version (policies.go).
	policyMu    sync.Mutex
	policyCache *policySet
	// fair holds the passes of the fair shares (fair.go).
	fair fairPasses
	// limitNamespaces are the namespaces this handle's last claim met
	// concurrency limits in, sorted: the next claim takes their locks
	// with its first statement (limits.go).
	limitNamespaces atomic.Pointer[[]string]
	// ratesGranted is set while this handle's last claim under rates got
	// every token it asked for: the next takes them in its claim statement
	// (rates.go).
	ratesGranted atomic.Bool
	// RateSet is the update of an existing bucket by a take of rate tokens
	// (RateTakeSet), in the dialect.
	RateSet string
	// reserves are the rate tokens this handle holds ahead (reserves.go).
	reserves reserves
	// bounds are the counts of namespaces with limits this handle bounds
	// from (limitbounds.go).
	bounds limitBounds
	// aheadShut: the last claim this handle sent with its query of
	// candidates (candidatesAhead) found its gate shut, so the next one
	// keeps its transaction open for the claim's rounds instead of
	// sending its COMMIT with it.
	aheadShut atomic.Bool
	// backlog: the last claim of Claim took every step it asked for, so
	// the next one most likely claims too. On a store whose statements
	// cannot write in their WITH (SQLite), it tries first to claim in one
	// statement (claimGated); elsewhere, a claim sent ahead with its
	// COMMIT is its transaction's only statement (candidatesAhead).
	backlog atomic.Bool
	// claimTexts are the texts of claim statements (claimText -> string).
	claimTexts sync.Map
}
