package claim

import (
	"errors"
	"fmt"
	"reflect"

	"github.com/weftrun/weft/internal/sqlstore/sqldb"
	"github.com/weftrun/weft/internal/sqlstore/sqltx"
	"github.com/weftrun/weft/store"
)

// This file holds the gated claim: one statement that selects the best
// ready steps (ClaimQuery) and claims them, unless its gate shuts. A claim
// under no policy that checks its candidates sends it with its first
// statement on PostgreSQL (candidatesAhead), and a batch of outcomes makes
// it in its own transaction for the steps it made ready (claimGated,
// CompleteAndClaim).

// gateShut is the condition under which a claim from its query of
// candidates claims nothing: the policies moved, or a candidate is under a
// step key of a limit or a rate (KeyRoom.limited, candidateRates), which
// the claim checks in rounds of its own.
const gateShut = gateMoved + ` OR EXISTS (SELECT 1 FROM c WHERE limit_key <> '' OR task_limit_key <> '' OR (` + rated + `))`

// gateMoved: the policies moved since the claim read them (its first
// parameter, their version); rated: a candidate under a step's rate.
const (
	gateMoved = PolicyVersion + ` <> ?`
	rated     = `rate_key <> '' AND rate_n >= 1 AND rate_per > 0`
)

// gateBoundsShut is gateShut for a claim that bounds the limits of the
// namespaces it expects to meet (bnd, limitbounds.go) from its handle's
// anchors: its query's candidates under limits may run where each is in a
// bounded namespace (bnd.b_ns) and no limit of its own is below that
// namespace's floor, and the namespace's totals, read locked (lc: they are
// the latest, and stay so until the claim commits), leave room for the whole
// claim (b_room: the floor less the claim's size). Its second parameter is
// the namespaces with a limit of their own (a candidate there is limited
// even with no key). PostgreSQL only: the bounds need its locks.
const gateBoundsShut = gateMoved + ` OR EXISTS (SELECT 1 FROM c WHERE ` + rated + `)
	OR EXISTS (SELECT 1 FROM c WHERE (limit_key <> '' OR task_limit_key <> '' OR namespace = ANY(?::text[]))
		AND NOT EXISTS (SELECT 1 FROM bnd WHERE b_ns = c.namespace AND (c.limit_key = '' OR c.limit_n >= b_floor) AND (c.task_limit_key = '' OR c.task_limit_n >= b_floor)))
	OR EXISTS (SELECT 1 FROM bnd LEFT JOIN lc ON lc.namespace = bnd.b_ns
		WHERE lc.namespace IS NULL OR b_steps + lc.steps - b_steps_total > b_room OR b_tasks + lc.tasks - b_tasks_total > b_room)`

// gateCounted is gateShut for a claim in one statement on a store with one
// writer at a time (SQLite) under limits: its candidates may run where,
// in each namespace with a limited one, what runs there now (steps, and
// tasks under a workflow limit: counted, exact under the writer's lock)
// and all its candidates there stay within the smallest limit of those
// candidates (their step and workflow limits, the namespace's own: caps,
// the relation of capsRowset). What runs in a namespace bounds what
// runs under each of its keys; where that bound does not settle it, the
// gate shuts and the claim counts key by key (countKeys).
const gateCounted = gateMoved + ` OR EXISTS (SELECT 1 FROM c WHERE ` + rated + `)
	OR EXISTS (SELECT 1 FROM (SELECT m.namespace, m.n, min(COALESCE(m.step_floor, 9e18), COALESCE(m.task_floor, 9e18), COALESCE(caps.k_n, 9e18)) AS floor
			FROM (SELECT namespace, count(*) AS n,
				min(CASE WHEN limit_key <> '' THEN limit_n END) AS step_floor,
				min(CASE WHEN task_limit_key <> '' THEN task_limit_n END) AS task_floor
				FROM c GROUP BY namespace) AS m
			LEFT JOIN caps ON caps.k_ns = m.namespace
			WHERE m.step_floor IS NOT NULL OR m.task_floor IS NOT NULL OR caps.k_ns IS NOT NULL) AS f
		WHERE (SELECT count(*) FROM steps WHERE state = 'running' AND namespace = f.namespace) + f.n > f.floor
		OR (SELECT count(*) FROM tasks WHERE state = 'running' AND limit_key <> '' AND namespace = f.namespace) + f.n > f.floor)`

// capsRowset is the relation caps of gateCounted: the namespaces' own
// limits.
func capsRowset(t *sqltx.Tx, caps map[string]int) (string, []any) {
	type limit struct {
		ns string
		n  int64
	}
	rows := make([]limit, 0, len(caps))
	for _, ns := range sqltx.SortedKeys(caps) {
		rows = append(rows, limit{ns, int64(caps[ns])})
	}
	return sqltx.Rowset(t, "caps", rows,
		sqltx.TextCol("k_ns", func(l *limit) string { return l.ns }),
		sqltx.IntCol("k_n", func(l *limit) int64 { return l.n }))
}

// gateBound is what a claim statement checks of one namespace whose limits
// the claim bounds (gateBoundsShut): the smallest limit it may meet there
// (floor), the room the claim needs under it (floor less the claim's size),
// and the anchor it bounds from: a count of running steps and tasks and
// the totals read with it.
type gateBound struct {
	ns                     string
	floor, room            int64
	steps, tasks           int64
	stepsTotal, tasksTotal int64
}

// gateBounds are the gate's bounds of a claim of claim steps under pol,
// from bounds (splitBounds), in the namespaces' order: the floor of each
// is also at most the namespace's own limit.
func gateBounds(bounds map[string]nsCount, pol *policySet, claim int) []gateBound {
	out := make([]gateBound, 0, len(bounds))
	for _, ns := range sqltx.SortedKeys(bounds) {
		n := bounds[ns]
		floor := n.floor
		if c, capped := pol.caps[ns]; capped && c < floor {
			floor = c
		}
		out = append(out, gateBound{ns: ns, floor: int64(floor), room: int64(floor - claim),
			steps: n.anchorSteps, tasks: n.anchorTasks, stepsTotal: n.stepsTotal, tasksTotal: n.tasksTotal})
	}
	return out
}

// boundsRowset is the relation bnd of gateBoundsShut.
func boundsRowset(t *sqltx.Tx, bounds []gateBound) (string, []any) {
	return sqltx.Rowset(t, "bnd", bounds,
		sqltx.TextCol("b_ns", func(b *gateBound) string { return b.ns }),
		sqltx.IntCol("b_floor", func(b *gateBound) int64 { return b.floor }),
		sqltx.IntCol("b_room", func(b *gateBound) int64 { return b.room }),
		sqltx.IntCol("b_steps", func(b *gateBound) int64 { return b.steps }),
		sqltx.IntCol("b_tasks", func(b *gateBound) int64 { return b.tasks }),
		sqltx.IntCol("b_steps_total", func(b *gateBound) int64 { return b.stepsTotal }),
		sqltx.IntCol("b_tasks_total", func(b *gateBound) int64 { return b.tasksTotal }))
}

// aheadQuery is a query of candidates sent with the claim's first
// statement, and its rows; or, where claim is set, the statement that
// claims what that query returns (unchecked).
type aheadQuery struct {
	q     string
	args  []any
	claim *claimStmt
	limit int // of the claim's steps
	rows  sqldb.Rows
	// last: the claim's COMMIT went with it (sqldb.Pipeliner.FollowLast).
	last bool
	// bounded: the namespaces whose limits the claim bounds, checked by
	// the claim statement (gateBoundsShut).
	bounded []string
	// alone: the claim is its transaction's only statement.
	alone bool
}

// errClaimAgain: a claim sent ahead with its COMMIT claimed nothing that
// stands (its gate was shut, or, sent alone, it took nothing and read no
// engine's state); the claim runs again in a transaction that stays open
// (Claim).
var errClaimAgain = errors.New("a claim sent with its commit claimed nothing")

// candidatesAhead sends the first round's query of candidates with the
// claim's first statement, in its round trip, where the transaction
// pipelines (sqldb.Pipeliner): built from the policies last read (pol), as if no limit
// were full and, under weights, the namespace last found alone still were
// (FairOthers). candidates uses its rows only if the claim asks exactly
// that query; otherwise (a limit full, slots shared) they are discarded.
//
// Where nothing of pol needs a check of the claim's own between its query
// and its claim, it sends instead the statement that claims what the
// query returns, in the same round trip: with no limits in force
// (unchecked), or with limits where the claim counts none (counting is
// false) and bounds every namespace it expects to meet (bounds, from the
// handle's anchors: gateBoundsShut), and under weights while one
// namespace is alone with ready work (FairOthers in the gate). Its COMMIT
// goes with it unless keepOpen.
func (t *ClaimTx) candidatesAhead(p store.ClaimParams, pol *policySet, leaseID int64, bounds map[string]nsCount, counting, keepOpen bool) error {
	pl, ok := t.X.(sqldb.Pipeliner)
	if !ok || pol == nil || pol.All || (pol.weights != nil && t.Plan.fair.lone() == "") {
		return nil
	}
	keys := newKeyRoom(pol, p.Caps, p.Limit)
	keys.breakers = newBreakerRoom(pol, t.Now)
	q, args := t.Plan.ClaimQuery(p.Limit, p, pol, keys)
	a := &aheadQuery{q: q, args: args, limit: p.Limit}
	st := sqldb.Statement{Query: t.H.Bind(q), Args: args}
	// The gate checks, in the claim statement, what of pol it can:
	// limits of namespaces the claim bounds, and weights while one
	// namespace is alone with ready work (FairOthers); other policies
	// need the claim's own check (gated).
	if !counting && t.H.Dialect.WithWrites() && gated(p, pol) && (len(pol.caps) == 0 || len(bounds) > 0) {
		from := ClaimFrom{Candidates: q, Args: args, Version: pol.Version}
		if len(bounds) > 0 {
			from.bounds, from.capped = gateBounds(bounds, pol, p.Limit), sqltx.SortedKeys(pol.caps)
		}
		if pol.weights != nil {
			from.alone = t.Plan.fair.lone()
		}
		c, err := t.ClaimStatement(from, leaseID)
		if err != nil {
			return err
		}
		a.claim = &c
		for _, b := range from.bounds {
			a.bounded = append(a.bounded, b.ns)
		}
		st = sqldb.Statement{Query: t.H.Bind(c.Query), Args: c.Args, What: "claim steps"}
		// A claim that claims in this statement needs nothing after it
		// (its dependencies' results come with it): its COMMIT goes with
		// it, one round trip fewer, unless the last such claim found its
		// gate shut (steps under keys of limits or rates), which would
		// take a transaction more, or this claim is made again after its
		// gate was shut so (keepOpen).
		a.last = !keepOpen && !t.Plan.aheadShut.Load()
	}
	switch {
	case a.last && !counting && pol.weights == nil && t.Plan.backlog.Load():
		// Under a backlog, the claim is its transaction's only
		// statement: its BEGIN, it and its COMMIT in one round trip,
		// without the claim's first statement (claimStart). Its gate
		// checks the policies last read; its query of candidates finds
		// none for an engine not live (ClaimQuery). Where it claims
		// nothing, the claim runs again with its first statement
		// (claimedAhead), which tells a lost engine so.
		a.alone = true
		pl.EndWithNext()
		rows, err := t.X.Query(t.Ctx, st.Query, st.Args...)
		if err != nil {
			return fmt.Errorf("claim steps: %w", err)
		}
		a.rows = rows
	case a.last:
		a.rows = pl.FollowLast(st)
	default:
		a.rows = pl.Follow(st)
	}
	t.ahead = a
	return nil
}

// unchecked reports whether a claim under pol may claim the steps its
// query selects without a check of its own between the two: no policy of
// pol or of the engine (p.Caps) checks the candidates (namespace limits,
// weights, rates, breakers not closed). What the steps carry themselves
// (keys of limits and rates) the claim still checks (gateShut). Where a
// statement's WITH may write, such a claim is sent with the claim's first
// statement (candidatesAhead).
func unchecked(p store.ClaimParams, pol *policySet) bool {
	return len(pol.caps) == 0 && pol.weights == nil && gated(p, pol)
}

// gated reports whether a claim under pol may be checked by its claim
// statement's gate alone, given what that gate is told (candidatesAhead):
// no engine's own caps, rates or breakers not closed.
func gated(p store.ClaimParams, pol *policySet) bool {
	return len(p.Caps) == 0 && len(pol.rates) == 0 && len(pol.breakers) == 0 && len(pol.wary) == 0
}

// claimedAhead reads the claim sent ahead (candidatesAhead), if any, in the
// claim's first round: done, with what it claimed added to claimed and
// deps, unless its gate was shut (gateShut), in which case nothing was
// claimed and the round selects its candidates as usual. An open gate
// says the policies the statement was built from were in force when it
// ran, so what it claimed stands.
//
// A claim that bounded limits (a.bounded) holds those namespaces, its
// statement checked their bounds, and it met them (keys.met) for the next
// claim to bound again.
func (t *ClaimTx) claimedAhead(leaseID int64, keys *KeyRoom, claimed *[]store.ClaimedStep, deps *[][]int) (done bool, err error) {
	a := t.ahead
	if a == nil || a.claim == nil {
		return false, nil
	}
	t.ahead = nil
	got, gotDeps, shut, err := t.readClaimed(a.rows, *a.claim, a.limit, leaseID)
	if err != nil {
		return false, err
	}
	t.Plan.aheadShut.Store(shut)
	if (shut && a.last) || (a.alone && len(got) == 0) {
		// Claimed nothing, and the transaction has ended: again, in
		// one that stays open; one sent alone read no engine's state.
		return false, errClaimAgain
	}
	if shut {
		return false, nil
	}
	t.committed = a.last
	for _, ns := range a.bounded {
		t.hold(ns)
		keys.met[ns] = true
	}
	t.boundsChecked = len(a.bounded) > 0
	*claimed, *deps = appendClaimed(*claimed, got), appendClaimed(*deps, gotDeps)
	return true, nil
}

// appendClaimed is append(to, more...), but more itself where to is empty:
// a claim's steps are large, and most claims take them in one round.
func appendClaimed[T any](to, more []T) []T {
	if len(to) == 0 {
		return more
	}
	return append(to, more...)
}

// aheadRows returns the rows of the query sent ahead (candidatesAhead) if
// it is q with args, else nil, discarding them.
func (t *ClaimTx) aheadRows(q string, args []any) (sqldb.Rows, error) {
	a := t.ahead
	if a == nil {
		return nil, nil
	}
	if a.claim == nil && a.q == q && reflect.DeepEqual(a.args, args) {
		t.ahead = nil
		return a.rows, nil
	}
	return nil, t.dropAhead()
}

// errClaimedAhead: a claim sent ahead claimed steps under policies that
// moved; its transaction is rolled back.
var errClaimedAhead = errors.New("a claim sent ahead claimed under policies that moved")

// dropAhead discards the statement sent ahead: the policies it was built
// from moved. A claim sent ahead then found its gate shut (the policy
// version it checks moved too, and versions only grow); had it claimed,
// the transaction is rolled back rather than leave steps claimed under
// policies the claim did not apply.
func (t *ClaimTx) dropAhead() error {
	a := t.ahead
	if a == nil {
		return nil
	}
	t.ahead = nil
	if a.claim == nil {
		return a.rows.Close()
	}
	got, _, shut, err := t.readClaimed(a.rows, *a.claim, 1, 0)
	if err != nil {
		return err
	}
	if !shut && len(got) > 0 {
		return errClaimedAhead
	}
	if a.last {
		// Its transaction has ended: the claim runs again in one of its
		// own, which keeps it open.
		t.Plan.aheadShut.Store(true)
		return errClaimAgain
	}
	return nil
}

// claimGated claims, in transaction t, up to p.Limit ready steps as
// Claim would, where the claim needs no check of its own between
// selecting its steps and claiming them: under the policies last read (it
// claims nothing before a claim has read them), no namespace limit,
// weight, rate or open breaker (unchecked), no limits met by the last
// claim, and no step under a key of a limit or a rate among those it
// selects (gateShut). Otherwise it claims nothing; the next Claim
// claims as usual. It takes no lock but the claimed rows', so it may run
// in a transaction that holds others (CompleteAndClaim, InsertAndClaim).
//
// Where a statement cannot write in its WITH (SQLite), the claim is one
// statement only if inOne (the claim loop's, under a backlog): for the few
// steps a write makes ready, the query of candidates, checked here, and an
// UPDATE by rowid are quicker than the statement's materialized candidates
// (SQLite dag7 p50 2.42 against 2.63 ms); for a full claim the statement
// is quicker (fanout5 +7%).
func (t *ClaimTx) claimGated(p store.ClaimParams, inOne bool) ([]store.ClaimedStep, error) {
	pol := t.Plan.cachedPolicies()
	if pol == nil || pol.All {
		return nil, nil
	}
	// With one writer at a time, a claim in one statement counts what
	// runs under limits in its gate (gateCounted).
	counted := !t.H.Dialect.WithWrites() && inOne && pol.weights == nil && gated(p, pol)
	if !counted && (!unchecked(p, pol) || len(t.Plan.predictedLimits()) > 0) {
		return nil, nil
	}
	leaseID := leaseOf(p)
	keys := newKeyRoom(pol, p.Caps, p.Limit)
	q, args := t.Plan.ClaimQuery(p.Limit, p, pol, keys)
	var claimed []store.ClaimedStep
	var deps [][]int
	if t.H.Dialect.WithWrites() || inOne {
		from := ClaimFrom{Candidates: q, Args: args, Version: pol.Version}
		if counted {
			from.caps = pol.caps
		}
		st, err := t.ClaimStatement(from, leaseID)
		if err != nil {
			return nil, err
		}
		rows, err := t.Query(st.Query, st.Args...)
		if err != nil {
			return nil, fmt.Errorf("claim steps: %w", err)
		}
		var shut bool
		// Room for what it will likely claim: under a backlog, its
		// slots; otherwise, after a write, about the steps the write
		// made ready (room for a hundred slots, 450 bytes each, was half
		// of what an engine allocated in dag7).
		expect := p.Limit
		if !inOne && !t.Plan.backlog.Load() {
			expect = min(expect, max(t.Readied, 1))
		}
		if claimed, deps, shut, err = t.readClaimed(rows, st, expect, leaseID); err != nil || shut {
			return nil, err
		}
	} else {
		// The only writer: what the query selects, the claim takes.
		rows, err := t.Query(q, args...)
		if err != nil {
			return nil, fmt.Errorf("select ready steps: %w", err)
		}
		ready, seen, err := scanCandidates(rows)
		if err != nil {
			return nil, err
		}
		if len(ready) > 0 && seen != pol.Version {
			return nil, nil
		}
		for _, c := range ready {
			if keys.limited(c) || len(candidateRates(c, pol, nil)) > 0 {
				return nil, nil
			}
		}
		if len(ready) > 0 {
			if claimed, deps, err = t.claim(idsOf(ready), leaseID); err != nil {
				return nil, err
			}
		}
	}
	if len(claimed) == 0 {
		return nil, nil
	}
	return claimed, t.claimContext(claimed, deps)
}

// ClaimMadeReady claims under p, in transaction t, the steps its write made
// ready (claimGated), for the engine p names (its claims are the
// engine's, not the write's); nothing where the write made none ready or p
// asks for none.
func (t *ClaimTx) ClaimMadeReady(p store.ClaimParams) ([]store.ClaimedStep, error) {
	if t.Readied == 0 || p.Limit <= 0 || t.Breakers.failed() {
		// After a failure under a breaker, the claim waits for the count
		// that this transaction writes last (flushBreakers): the engine's
		// next claim reads it.
		return nil, nil
	}
	t.Engine = p.EngineID
	return t.claimGated(p, false)
}

// CountTaken counts the steps of claimed that mine reports to be among
// those the claim's write made ready.
func CountTaken(claimed []store.ClaimedStep, mine func(store.ClaimedStep) bool) int {
	n := 0
	for _, c := range claimed {
		if mine(c) {
			n++
		}
	}
	return n
}
