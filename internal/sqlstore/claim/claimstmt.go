package claim

import (
	"errors"
	"fmt"
	"slices"

	"github.com/weftrun/weft/internal/sqlstore/sqltx"
	"github.com/weftrun/weft/state"
)

// This file holds the claim statement: what it claims (the steps a round
// picked, or those its own query of candidates returns where a gate lets
// it: claimgate.go), and its text, built once per shape. It marks the
// steps running under the lease (their claims not yet audited), starts
// their tasks and, where limits are held, adds to their totals; claimed.go
// reads what it returns.

// ClaimFrom is what a claim statement claims: the steps where says (where
// and args), or, where candidates is set, the steps that query of
// candidates returns (ClaimQuery's, with its args), if every one of them
// may run without a check of the claim's (gate: no step key of a limit or
// a rate) and the policies are still at version; or, where bounds is set
// too, if every one under a limit is in a namespace of bounds whose bound
// leaves room (gateBoundsShut; capped: the namespaces with a limit of
// their own), or, with one writer, whose count leaves room (gateCounted;
// caps).
type ClaimFrom struct {
	where      string
	Args       []any
	Candidates string
	Version    int64
	bounds     []gateBound
	capped     []string
	// caps: on a store with one writer, the namespaces' own limits, for
	// a gate that counts what runs under limits (gateCounted); nil: none
	// is checked
	caps map[string]int
	// alone: the namespace last found alone with ready work under
	// weights; the gate shuts where another has any (FairOthers)
	alone string
}

// claimStmt is a claim statement and what its rows carry.
type claimStmt struct {
	Query    string
	Args     []any
	taking   bool // rate tokens granted (granted)
	totaling bool // the totals of the namespaces' limits
	// gated: the statement claimed from its query of candidates (ClaimFrom);
	// its rows end with whether they were claimed, one row saying not
	// where the gate was shut.
	gated bool
}

// ClaimStatement builds the statement that claims the steps of from.
func (t *ClaimTx) ClaimStatement(from ClaimFrom, leaseID int64) (claimStmt, error) {
	if !t.Work.Claiming() {
		// On sessions of other work, PostgreSQL plans the statement from
		// the tables' statistics: a sequential scan of steps and tasks
		// once they are stale.
		return claimStmt{}, errors.New("claim steps: in a transaction not begun for claims (sqldb.Work)")
	}
	st := claimStmt{taking: t.H.Dialect.WithWrites() && t.rateTake != nil, gated: from.Candidates != ""}
	text := claimText{candidates: from.Candidates, where: from.where, withWrites: t.H.Dialect.WithWrites(), taking: st.taking}
	var args []any
	held := t.limitHeld
	switch {
	case st.gated && len(from.bounds) > 0:
		// A claim under limits it bounds (candidatesAhead): the bounds
		// go first, then the gate's parameters.
		bnd, bndArgs := boundsRowset(t.Tx, from.bounds)
		text.bounds = bnd
		capped := from.capped
		if capped == nil {
			capped = []string{} // an empty array, not NULL
		}
		args = append(append(slices.Clip(from.Args), bndArgs...), from.Version, capped)
		held = nil
		for _, b := range from.bounds {
			held = append(held, b.ns)
		}
	case st.gated && from.caps != nil:
		// One writer: the gate counts (gateCounted).
		c, cArgs := capsRowset(t.Tx, from.caps)
		text.caps = c
		args = append(append(slices.Clip(from.Args), cArgs...), from.Version)
	case st.gated:
		// Only for a claim with no check of its own (unchecked).
		args = append(slices.Clip(from.Args), from.Version)
	}
	if from.alone != "" {
		text.alone = true
		args = append(args, from.alone, from.alone)
	}
	if st.taking {
		// A take of rate tokens left to this statement (rated) comes
		// first; the steps are claimed only if every bucket granted all.
		tq, targs := t.rateTakeQuery(t.rateTake.upsert)
		text.take = tq
		args = append(args, targs...)
	}
	args = append(args, leaseID, t.Engine, t.Now, t.Now)
	if !st.gated {
		args = append(args, from.Args...) // where's
	}
	// The outcomes queued before the claim are written first: their audit
	// rows read the claims of the runs they end from the steps' rows,
	// which the claim may change (claimOfRun). In the claim statement's
	// round trip where the transaction pipelines.
	if err := t.FlushAudit(); err != nil {
		return st, err
	}
	if !t.H.Dialect.WithWrites() {
		// Where the gate is shut, it claims nothing and says no more.
		st.Query, st.gated, st.Args = t.Plan.claimText(text), false, args
		return st, nil
	}
	st.totaling = t.H.Dialect.LimitRoom() != "" && len(held) > 0
	text.totaling = st.totaling
	if err := state.CheckTask(state.TaskPending, state.TaskRunning); err != nil {
		return st, err
	}
	st.Query = t.Plan.claimText(text)
	args = append(args, t.Now, leaseID)
	if st.totaling {
		args = append(args, held)
	}
	st.Args = args
	return st, nil
}

// claimText is what the text of a claim statement depends on
// (ClaimStatement's arguments aside).
type claimText struct {
	candidates, where, take      string
	bounds                       string // the relation bnd of gateBoundsShut
	caps                         string // the relation caps of gateCounted
	withWrites, taking, totaling bool
	alone                        bool // FairOthers in the gate
}

// claimText returns the text of the claim statement of k, built once: a
// claim under a backlog is made hundreds of times a second, and its text
// is kilobytes.
func (s *Planner) claimText(k claimText) string {
	if q, ok := s.claimTexts.Load(k); ok {
		return q.(string)
	}
	q := k.build()
	s.claimTexts.Store(k, q)
	return q
}

// build builds the text of the claim statement of k.
func (k claimText) build() string {
	gated := k.candidates != ""
	where, lead := k.where, ""
	if gated {
		shut, ctes := gateShut, ""
		if k.bounds != "" {
			// The namespaces' totals, locked in their order (as every
			// claim takes them), read as the latest committed.
			shut, ctes = gateBoundsShut, `bnd AS (SELECT * FROM `+k.bounds+`),
				lc AS MATERIALIZED (SELECT namespace, steps, tasks FROM limit_claims WHERE namespace IN (SELECT b_ns FROM bnd) ORDER BY namespace FOR UPDATE), `
		}
		if k.alone {
			shut += ` OR ` + FairOthers
		}
		lead = `c AS (` + k.candidates + `), ` + ctes + `g AS (SELECT NOT (` + shut + `) AS open), `
		where = `id = ANY(ARRAY(SELECT id FROM c)) AND (SELECT open FROM g)`
		if !k.withWrites {
			lead = `c AS MATERIALIZED (` + k.candidates + `), g AS (SELECT NOT (` + gateShut + `) AS open) `
			if k.caps != "" {
				lead = `c AS MATERIALIZED (` + k.candidates + `), caps AS (SELECT * FROM ` + k.caps + `), g AS (SELECT NOT (` + gateCounted + `) AS open) `
			}
			where = `id IN (SELECT id FROM c) AND (SELECT open FROM g)`
		}
	}
	var take, granted string
	if k.taking {
		// Each row also carries the tokens reserved, as "KEY N".
		take = `b AS (` + k.take + ` RETURNING key, wanted, taken, granted), `
		where += ` AND (SELECT coalesce(bool_and(taken >= wanted), true) FROM b)`
		granted = `, (SELECT array_agg(key || ' ' || granted) FROM b WHERE granted > 0)`
	}
	update := `UPDATE steps SET state = 'running', sub = '', attempt = attempt + 1, lease_id = ?, engine_id = ?, claim_audited = 0,
		started_at = ?, deadline = CASE WHEN run_timeout > 0 THEN ? + run_timeout END, expires_at = NULL, run_at = NULL, error = ''
		WHERE ` + where + ` RETURNING ` + sqltx.ClaimedStepColumns + `, sort_key`
	if !k.withWrites {
		if gated {
			return `WITH ` + lead + update
		}
		return update
	}
	// The tasks to start by primary key: (state || '') keeps the
	// planner off tasks_state, whose pending entries of tasks started
	// since the last vacuum it would read at every claim. Each one's
	// start rides on the claim of the first of its steps in the claim's
	// rows (start_step), found in two arrays of the claimed steps built
	// once: neither a join (with its sort, which the statement's plan
	// steering prices so that PostgreSQL planned it again at most
	// executions) nor a lookup of the claimed steps for each task.
	// The totals of the namespaces whose limits the claim counted or
	// bounded grow by what it claims, in the namespaces' order (claims
	// that bound take these rows without other locks), and each row
	// carries its namespace's totals as they are now (limitbounds.go).
	// A task with two steps claimed counts twice, which only loosens
	// the bound.
	totals, totalsCols, totalsJoin := "", "", ""
	if k.totaling {
		totals = `, totals AS (INSERT INTO limit_claims AS l (namespace, steps, tasks)
			SELECT s.namespace, count(*), count(started.id) FROM s LEFT JOIN started ON started.id = s.task_id
			WHERE s.namespace = ANY(?::text[]) GROUP BY s.namespace ORDER BY s.namespace
			ON CONFLICT (namespace) DO UPDATE SET steps = l.steps + excluded.steps, tasks = l.tasks + excluded.tasks
			RETURNING namespace, steps, tasks)`
		totalsCols = `, tot.steps, tot.tasks`
		totalsJoin = ` LEFT JOIN totals tot ON tot.namespace = s.namespace`
	}
	// The claim writes no audit row: the row that ends each run records
	// its claim (claimOfRun, or as the outcome reads it), with the task's
	// start where it is the claim of start_step of a task it started.
	const taskOf = ` CROSS JOIN LATERAL (SELECT input, workflow, version, trace_context FROM tasks WHERE id = %s.task_id OFFSET 0) t`
	// The results of each step's dependencies come with it (depResultsOf),
	// not in a statement of their own.
	q := `WITH ` + lead + take + `s AS (` + update + `),
		started AS (UPDATE tasks SET state = 'running', started_at = ?, start_lease = ?,
				start_step = (ARRAY(SELECT idx FROM s))[array_position(ARRAY(SELECT task_id FROM s), tasks.id)]
			WHERE id = ANY(ARRAY(SELECT task_id FROM s)) AND (state || '') = 'pending'
			RETURNING id, input, workflow, version, trace_context)` + totals + `
		SELECT s.*, COALESCE(st.input, t.input), COALESCE(st.workflow, t.workflow), COALESCE(st.version, t.version), COALESCE(st.trace_context, t.trace_context),
			` + depResultsOf + `, st.id IS NOT NULL` + totalsCols + granted
	if gated {
		q += `, true`
	}
	// A task the claim started comes back from its UPDATE; only the others
	// are read again.
	q += ` FROM s LEFT JOIN started st ON st.id = s.task_id
		LEFT JOIN LATERAL (SELECT input, workflow, version, trace_context FROM tasks WHERE id = s.task_id AND st.id IS NULL OFFSET 0) t ON true` + totalsJoin
	if gated {
		// Where the gate is shut: one row of the first candidate, as it
		// is, that says so.
		var none string
		if k.totaling {
			none += `, NULL, NULL`
		}
		if k.taking {
			none += `, NULL`
		}
		q += ` UNION ALL SELECT ` + sqltx.Qualify("x", sqltx.ClaimedStepColumns) + `, x.sort_key, t.input, t.workflow, t.version, t.trace_context, NULL, false` + none + `, false
			FROM steps x` + fmt.Sprintf(taskOf, "x") + ` WHERE x.id = (SELECT id FROM c LIMIT 1) AND NOT (SELECT open FROM g)`
	}
	return q
}
