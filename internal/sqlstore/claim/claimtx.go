package claim

import "github.com/weftrun/weft/internal/sqlstore/sqltx"

// ClaimTx is a claim in a write transaction: the transaction's helpers and
// the claim's scratch, what its statements locked, counted and took, which
// the next statements of the same claim build on. What outlives the claim
// is the handle's planner (planner.go).
type ClaimTx struct {
	*sqltx.Tx
	// Plan is the handle's planner.
	Plan *Planner
	// Breakers are the transaction's outcomes of steps with a circuit
	// breaker (txn.breakers), which a claim's probes add to.
	Breakers *BreakerWork
	// Started: the handlers' part of tasks started before, read in this
	// transaction (readTask).
	Started map[int64]ClaimedTask
	// Ran: the results of the runs this transaction recorded, by task
	// and index, as dependencies' results (ranHere).
	Ran map[StepAt]DepResult
	// fairLocked: the claim holds the fair shares' lock (fair.go).
	fairLocked bool
	// limitHeld: the namespaces whose limits the claim counted (holding
	// their locks) or bounded (limitbounds.go), whose totals its claim
	// statements add to; limitTotals: the totals they returned, and
	// limitOwn, what the claim added to them.
	limitHeld             []string
	limitTotals, limitOwn map[string]limitTotals
	// totalsMax: the last namespace, by name, whose row of limit_claims
	// a claim statement of this claim took (once limitTotals has any).
	totalsMax string
	// fairRead: what the claim's first statement read of FairReadiness,
	// for its first round (fair.go).
	fairRead []fairRow
	// fairAlone: the claim's first statement found that no namespace but
	// the one last found alone with ready work has any (FairOthers).
	fairAlone bool
	// boundsChecked: the claim's statement checked the bounds of the
	// limits it claimed under (gateBoundsShut), not the claim.
	boundsChecked bool
	// limitLocked: the claim holds locks of namespaces' limits
	// (limits.go).
	limitLocked bool
	// rateTake is a take of rate tokens the next claim statement makes
	// (rates.go).
	rateTake *optimisticTake
	// ahead: the first round's query of candidates, sent with the claim's
	// first statement (candidatesAhead).
	ahead *aheadQuery
	// depResults: the results of claimed steps' dependencies, by step,
	// read with their claim statement (claimed.go).
	depResults map[int64][]DepResult
	// lastClaim: the next claim statement ends the transaction
	// (endsWithClaim).
	lastClaim bool
	// committed: the transaction ended with a claim sent with its COMMIT
	// (sqldb.Pipeliner.FollowLast); what the claim still reads, it reads outside.
	committed bool
}
