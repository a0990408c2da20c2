package claim

import (
	"database/sql"
	"errors"
	"fmt"

	"github.com/weftrun/weft/internal/sqlstore/sqldb"
	"github.com/weftrun/weft/store"
)

// This file holds the claim: the one statement that picks the best ready
// steps (claimed.go marks them running under a lease and loads what their
// handlers see). Scheduling policies are predicates of that statement and a cheap
// check of the rows it returns, never a second scheduler:
//
//   - pauses (policies.go) add "namespace NOT IN …" and "NOT (namespace = …
//     AND workflow = …)" to the query, or end the claim when all is paused;
//   - concurrency limits (limits.go: of namespaces, held in the database or
//     an engine's NamespaceCaps, and the keys of steps and workflows) are
//     checked on the candidates the query returned, counted in one
//     statement, and what is full is skipped by the query's next round;
//   - namespace weights (fair.go) make the first round one query per
//     namespace with ready work, each limited to its share of the slots;
//   - rate limits (rates.go) take the tokens of the candidates that may
//     run, in one statement, and defer those that get none to when a
//     token will exist.
//
// Nothing of this runs while no policy is set: the claim reads the policy
// version with the engine's state, in one statement it makes anyway (and
// under a backlog not even that: candidatesAhead), and a candidate under
// no limit costs a map lookup and two string comparisons.

// leaseOf is the lease a claim under p takes: p's, or a new one.
func leaseOf(p store.ClaimParams) int64 {
	if p.LeaseID != 0 {
		return p.LeaseID
	}
	return store.NewLeaseID()
}

// maxRounds bounds how many times one claim selects candidates: a limit
// can fill up mid-batch, and the next round skips what is full.
const maxRounds = 3

// PolicyVersion reads the version of the policies.
const PolicyVersion = `COALESCE((SELECT version FROM policy_version WHERE id = 1), 0)`

// errPoliciesMoved: the policies changed while a claim applied them.
var errPoliciesMoved = errors.New("the policies changed during the claim")

// claimRounds selects and claims ready steps under pol, in up to
// maxRounds rounds (a limit can fill up mid-batch, and the next round
// skips what is full), adding them to claimed and their dependencies to
// deps. errPoliciesMoved ends it when a round's query saw the policies
// moved since the claim read them.
func (t *ClaimTx) claimRounds(p store.ClaimParams, pol *policySet, keys *KeyRoom, rates *rateClaim, leaseID int64,
	claimed *[]store.ClaimedStep, deps *[][]int, held *bool) error {
	for round := range maxRounds {
		want := p.Limit - len(*claimed)
		if want <= 0 {
			return nil
		}
		if round == 0 {
			if done, err := t.claimedAhead(leaseID, keys, claimed, deps); done || err != nil {
				return err
			}
		}
		ids, more, err := t.candidates(want, p, pol, keys, rates, round)
		if err != nil {
			return err
		}
		*held = *held || keys.heldBack
		if len(ids) > 0 {
			t.lastClaim = !more && t.endsWithClaim()
			got, gotDeps, short, err := t.claimTaken(ids, leaseID)
			if err != nil {
				return err
			}
			more = more || short
			*claimed, *deps = appendClaimed(*claimed, got), appendClaimed(*deps, gotDeps)
		}
		if !more {
			return nil
		}
	}
	return nil
}

// endsWithClaim reports whether a claim's transaction may end with its
// claim statement (its COMMIT in the same round trip: EndWithNext) once no
// round is left: nothing is checked or written after that statement. Not
// where it takes rate tokens (a bucket that falls short is read after it:
// rateFallback), holds limits (their bounds are checked after it:
// checkBounds), wrote a due time or readied steps (a notification goes
// with the COMMIT) or recorded breaker outcomes.
func (t *ClaimTx) endsWithClaim() bool {
	_, ok := t.X.(sqldb.Pipeliner)
	return ok && t.Owned && t.H.Dialect.WithWrites() && t.rateTake == nil && len(t.limitHeld) == 0 &&
		!t.Timed && !t.LeftReady() && len(t.Breakers.Hits) == 0 && !t.Breakers.Bump
}

// claimStart runs a claim's first statement: it reads the engine's state
// (a claim of an engine not live fails with store.ErrEngineLost) and the
// version of the policies, takes the fair shares' lock and reads their
// readiness while the policies last read (cached) hold weights
// (FairReadiness does when they were set since) or, while the last read
// found one namespace alone with ready work, only asks whether another has
// any (FairOthers), and locks and counts the namespaces in predicted, those
// the last claim met limits in (limits.go), returning their counts.
//
// It returns the policy version it read: the counts of the predicted
// namespaces hold only under the policies the claim expected.
func (t *ClaimTx) claimStart(p store.ClaimParams, predicted []string, cached *policySet) (version int64, room []countRow, err error) {
	q := `SELECT (SELECT state FROM engines WHERE id = ?), ` + PolicyVersion
	args := []any{p.EngineID}
	readiness, probe := false, false
	weights := cached != nil && len(cached.weights) > 0
	alone := ""
	if weights {
		alone = t.Plan.fair.lone()
	}
	// Without FairReadiness, FairReadiness takes the lock and reads when
	// the claim shares slots.
	switch {
	case alone != "":
		q += ", " + FairOthers
		args = append(args, alone, alone)
		probe = true
	case t.H.Dialect.FairReadiness() != "" && weights:
		q += ", " + t.H.Dialect.FairReadiness()
		args = append(args, fairLock, MaxFairNamespaces)
		t.fairLocked, readiness = true, true
	}
	if len(predicted) > 0 {
		// Taken before any other lock of the claim, waiting, in one order.
		q += `, r.limit_kind, r.limit_name, r.limit_n FROM (SELECT 1) AS one LEFT JOIN LATERAL ` +
			fmt.Sprintf(t.H.Dialect.LimitRoom(), "?", "true", "NULL") + ` AS r ON true`
		args = append(args, predicted)
		t.limitLocked = true
	} else {
		q += ", NULL, NULL, NULL"
	}
	rows, err := t.Query(q, args...)
	if err != nil {
		return 0, nil, fmt.Errorf("check engine %s: %w", p.EngineID, err)
	}
	// One row, or one per count of the predicted namespaces.
	type first struct {
		state   sql.NullString
		version int64
		ready   []string
		others  sql.NullBool
		kind, n sql.NullInt64
		name    sql.NullString
	}
	got, err := sqldb.Collect(rows, func(r sqldb.Row) (first, error) {
		var f first
		dest := []any{&f.state, &f.version}
		switch {
		case readiness:
			dest = append(dest, &f.ready)
		case probe:
			dest = append(dest, &f.others)
		}
		err := r.Scan(append(dest, &f.kind, &f.name, &f.n)...)
		return f, err
	})
	if err != nil {
		return 0, nil, fmt.Errorf("check engine %s: %w", p.EngineID, err)
	}
	if probe && len(got) > 0 {
		t.fairAlone = !got[0].others.Bool
	}
	if readiness && len(got) > 0 {
		if t.fairRead, err = parseFairRows(got[0].ready); err != nil {
			return 0, nil, err
		}
	}
	for _, f := range got {
		if f.state.Valid && f.state.String != "live" {
			return 0, nil, fmt.Errorf("engine %s is %s: %w", p.EngineID, f.state.String, store.ErrEngineLost)
		}
		version = f.version
		if f.kind.Valid {
			room = append(room, countRow{kind: int(f.kind.Int64), key: f.name.String, n: f.n.Int64})
		}
	}
	return version, room, nil
}

// namespaceRow is a namespace with a number: a count of its steps, or the
// id of one of them.
type namespaceRow struct {
	N         int64
	Namespace string
}

// ScanNamespaceRow reads a namespace and a number, in that order.
func ScanNamespaceRow(r sqldb.Row) (namespaceRow, error) {
	var v namespaceRow
	err := r.Scan(&v.Namespace, &v.N)
	return v, err
}

// candidate is a ready step the claim query returned, with what the
// policies check: its namespace and its concurrency keys.
type candidate struct {
	id, taskID int64
	namespace  string
	limitKey   string
	limitN     int
	taskKey    string
	taskN      int
	breakerKey string
	rateKey    string
	rateN      int
	ratePer    int64
}

// candidates selects the best ready steps, skipping paused targets and
// full limits, and keeps only as many under a limit as it has room for.
// more reports that another round may find more: a limit turned out full
// and the query returned as many rows as it was asked for.
func (t *ClaimTx) candidates(want int, p store.ClaimParams, pol *policySet, keys *KeyRoom, rates *rateClaim, round int) (ids []int64, more bool, err error) {
	var q string
	var args []any
	fair := false
	if round == 0 && pol != nil && pol.weights != nil {
		if q, args, fair, err = t.fairQuery(want, p, pol, keys); err != nil {
			return nil, false, err
		}
	}
	if !fair {
		q, args = t.Plan.ClaimQuery(want, p, pol, keys)
	}
	rows, err := t.aheadRows(q, args)
	if err == nil && rows == nil {
		rows, err = t.Query(q, args...)
	}
	if err != nil {
		return nil, false, fmt.Errorf("select ready steps: %w", err)
	}
	ready, seen, err := scanCandidates(rows)
	if err != nil {
		return nil, false, err
	}
	if pol != nil && len(ready) > 0 && seen != pol.Version {
		// The policies moved between the claim's first statement and
		// this one, which may see work made ready since under them (a
		// pause, a breaker that opened): claim under the new ones.
		return nil, false, errPoliciesMoved
	}
	limited := false
	for _, c := range ready {
		if keys.limited(c) {
			limited = true
			break
		}
	}
	kept := ready
	if limited {
		// Only now, and only for the limits of these candidates: count
		// what runs under each (locked on PostgreSQL, see limits.go).
		if err := t.countKeys(ready, keys, round == 0); err != nil {
			return nil, false, err
		}
		kept = make([]candidate, 0, len(ready))
		for _, c := range ready {
			if !keys.limited(c) || keys.take(c) {
				kept = append(kept, c)
			} else {
				keys.heldBack = true
			}
		}
	}
	// Under a breaker that may probe, one probe (breakers.go).
	if kept, err = (breakerClaim{t}).probes(kept, keys.breakers); err != nil {
		return nil, false, err
	}
	// Rate limits last: tokens are taken only for what else may run. A
	// probe its rate defers gives its place back.
	probing := keys.breakers != nil && len(keys.breakers.probed) > 0
	if kept, err = t.rated(kept, pol, rates, round, probing); err != nil {
		return nil, false, err
	}
	if err := (breakerClaim{t}).unprobed(kept, keys.breakers); err != nil {
		return nil, false, err
	}
	if t.rateTake != nil {
		// Whether the take left some of kept unclaimed is known after the
		// claim statement (claimTaken).
		t.rateTake.full = len(ready) == want
	}
	// Slots a namespace of the fair share could not use go to the next
	// round.
	return idsOf(kept), (fair && len(kept) < want) || (len(ready) == want && len(kept) < len(ready)), nil
}

// scanCandidates reads the rows of ClaimQuery: the candidates, and the
// policy version the query saw.
func scanCandidates(rows sqldb.Rows) (ready []candidate, seen int64, err error) {
	ready, err = sqldb.Collect(rows, func(r sqldb.Row) (candidate, error) {
		var c candidate
		err := r.Scan(&c.id, &c.namespace, &c.taskID, &c.limitKey, &c.limitN, &c.taskKey, &c.taskN, &c.rateKey, &c.rateN, &c.ratePer, &c.breakerKey, &seen)
		return c, err
	})
	if err != nil {
		return nil, 0, fmt.Errorf("select ready steps: %w", err)
	}
	return ready, seen, nil
}

func idsOf(cs []candidate) []int64 {
	ids := make([]int64, len(cs))
	for i, c := range cs {
		ids[i] = c.id
	}
	return ids
}

// ClaimQuery is the query that picks the steps to claim: the best ready
// steps, in effective priority order, skipping paused targets, namespaces
// at their cap and full concurrency keys.
func (pl *Planner) ClaimQuery(want int, p store.ClaimParams, pol *policySet, keys *KeyRoom) (string, []any) {
	// The policy version, read with the steps (PolicyVersion), tells a
	// claim whether the policies it applies still hold when it sees them.
	q := `SELECT id, namespace, task_id, limit_key, limit_n, task_limit_key, task_limit_n, rate_key, rate_n, rate_per, breaker_key, ` +
		PolicyVersion + ` FROM steps WHERE state = 'ready'`
	var args []any
	if p.EngineID != "" {
		// The claim's first statement found the engine live; a reaper may
		// have declared it dead since, returning its steps to ready in the
		// same transaction. Checked again in the statement that sees those
		// steps, an engine declared dead never claims them back under the
		// identity it lost.
		q += ` AND NOT EXISTS (SELECT 1 FROM engines WHERE id = ? AND state <> 'live')`
		args = append(args, p.EngineID)
	}
	if p.TaskID != 0 {
		q += ` AND task_id IN (SELECT id FROM tasks WHERE id = ? OR root_task_id = ?)`
		args = append(args, p.TaskID, p.TaskID)
	}
	for _, c := range candidatePolicies {
		q, args = c.exclude(q, args, pol, keys)
	}
	q, args = andIn(q, args, `handler IN`, p.Handlers)
	q, args = andIn(q, args, `namespace IN`, p.Namespaces)
	if p.Handlers != nil && len(p.Handlers) == 0 {
		q += ` AND 1 = 0` // an empty list of handlers claims nothing
	}
	if p.Namespaces != nil && len(p.Namespaces) == 0 {
		q += ` AND 1 = 0`
	}
	q += ` ORDER BY sort_key ` + pl.Dialect.ClaimLimit()
	if pl.Dialect.ClaimLock() != "" {
		q += " " + pl.Dialect.ClaimLock()
	}
	return q, append(args, want)
}
