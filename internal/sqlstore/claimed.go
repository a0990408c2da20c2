package sqlstore

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// This file holds what a claim does to the steps it picked (claim.go): marks
// them running under the lease, starts their tasks and loads what their
// handlers see.

// claim marks candidates running and returns them with the indexes of their
// dependencies. They are still ready: this transaction locked them (FOR
// UPDATE) or is the only writer, so the update looks them up by primary key
// alone. Where the database allows it, the same statement starts their
// tasks and loads the task's part of what the handlers see (claimContext
// does the rest).
func (t *txn) claim(ids []int64, leaseID int64) ([]store.ClaimedStep, [][]int, error) {
	where, inArgs := t.idIn("id", ids)
	st, err := t.claimStatement(claimFrom{where: where, args: inArgs}, leaseID)
	if err != nil {
		return nil, nil, err
	}
	if t.lastClaim {
		// Nothing follows (endsWithClaim): the COMMIT goes with it.
		t.lastClaim = false
		t.x.(Pipeliner).EndWithNext()
		t.committed = true
	}
	rows, err := t.query(st.q, st.args...)
	if err != nil {
		return nil, nil, fmt.Errorf("claim steps: %w", err)
	}
	out, deps, _, err := t.readClaimed(rows, st, len(ids), leaseID)
	if err != nil {
		return nil, nil, err
	}
	return out, deps, nil
}

// claimFrom is what a claim statement claims: the steps where says (where
// and args), or, where candidates is set, the steps that query of
// candidates returns (claimQuery's, with its args), if every one of them
// may run without a check of the claim's (gate: no step key of a limit or
// a rate) and the policies are still at version; or, where bounds is set
// too, if every one under a limit is in a namespace of bounds whose bound
// leaves room (gateBoundsShut; capped: the namespaces with a limit of
// their own), or, with one writer, whose count leaves room (gateCounted;
// caps).
type claimFrom struct {
	where      string
	args       []any
	candidates string
	version    int64
	bounds     []gateBound
	capped     []string
	// caps: on a store with one writer, the namespaces' own limits, for
	// a gate that counts what runs under limits (gateCounted); nil: none
	// is checked
	caps map[string]int
	// alone: the namespace last found alone with ready work under
	// weights; the gate shuts where another has any (fairOthers)
	alone string
}

// claimStmt is a claim statement and what its rows carry.
type claimStmt struct {
	q        string
	args     []any
	taking   bool // rate tokens granted (granted)
	totaling bool // the totals of the namespaces' limits
	// gated: the statement claimed from its query of candidates (claimFrom);
	// its rows end with whether they were claimed, one row saying not
	// where the gate was shut.
	gated bool
}

// claimStatement builds the statement that claims the steps of from.
func (t *txn) claimStatement(from claimFrom, leaseID int64) (claimStmt, error) {
	st := claimStmt{taking: t.s.d.WithWrites && t.rateTake != nil, gated: from.candidates != ""}
	text := claimText{candidates: from.candidates, where: from.where, withWrites: t.s.d.WithWrites, taking: st.taking}
	var args []any
	held := t.limitHeld
	switch {
	case st.gated && len(from.bounds) > 0:
		// A claim under limits it bounds (candidatesAhead): the bounds
		// go first, then the gate's parameters.
		bnd, bndArgs := boundsRowset(t, from.bounds)
		text.bounds = bnd
		capped := from.capped
		if capped == nil {
			capped = []string{} // an empty array, not NULL
		}
		args = append(append(slices.Clip(from.args), bndArgs...), from.version, capped)
		held = nil
		for _, b := range from.bounds {
			held = append(held, b.ns)
		}
	case st.gated && from.caps != nil:
		// One writer: the gate counts (gateCounted).
		c, cArgs := capsRowset(t, from.caps)
		text.caps = c
		args = append(append(slices.Clip(from.args), cArgs...), from.version)
	case st.gated:
		// Only for a claim with no check of its own (unchecked).
		args = append(slices.Clip(from.args), from.version)
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
	args = append(args, leaseID, t.engine, t.now, t.now)
	if !st.gated {
		args = append(args, from.args...) // where's
	}
	if !t.s.d.WithWrites {
		// Where the gate is shut, it claims nothing and says no more.
		st.q, st.gated, st.args = t.s.claimText(text), false, args
		return st, nil
	}
	st.totaling = t.s.d.LimitRoom != "" && len(held) > 0
	text.totaling = st.totaling
	if err := state.CheckTask(state.TaskPending, state.TaskRunning); err != nil {
		return st, err
	}
	// Entries queued before the claim (a breaker's probe, the outcomes
	// of a batch that claims) keep their place ahead of those the claim
	// statement writes: their statement goes ahead of it, in its round
	// trip where the transaction pipelines.
	if err := t.flushAudit(); err != nil {
		return st, err
	}
	st.q = t.s.claimText(text)
	args = append(args, t.now)
	if st.totaling {
		args = append(args, held)
	}
	st.args = append(args, string(state.StepReady), string(state.StepRunning), t.now, t.engine, reasonClaimed,
		string(state.TaskPending), string(state.TaskRunning), reasonFirstClaimed)
	return st, nil
}

// claimText is what the text of a claim statement depends on
// (claimStatement's arguments aside).
type claimText struct {
	candidates, where, take      string
	bounds                       string // the relation bnd of gateBoundsShut
	caps                         string // the relation caps of gateCounted
	withWrites, taking, totaling bool
	alone                        bool // fairOthers in the gate
}

// claimText returns the text of the claim statement of k, built once: a
// claim under a backlog is made hundreds of times a second, and its text
// is kilobytes.
func (s *Store) claimText(k claimText) string {
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
			shut += ` OR ` + fairOthers
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
	update := `UPDATE steps SET state = 'running', sub = '', attempt = attempt + 1, lease_id = ?, engine_id = ?,
		started_at = ?, deadline = CASE WHEN run_timeout > 0 THEN ? + run_timeout END, expires_at = NULL, run_at = NULL, error = ''
		WHERE ` + where + ` RETURNING ` + stepColumns + `, sort_key`
	if !k.withWrites {
		if gated {
			return `WITH ` + lead + update
		}
		return update
	}
	// The tasks to start by primary key: (state || '') keeps the
	// planner off tasks_state, whose pending entries of tasks started
	// since the last vacuum it would read at every claim.
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
	// The claim's audit rows are written by this statement too: one a
	// step, in the order of the tasks and their steps, the first
	// claimed step of a task that starts carrying the task's start, so
	// that they read back as the entries auditClaimed queues. (Folding
	// a task's steps onto one row, as foldAudit does, cost this
	// statement, grouped, as much as the rows it saved.)
	audit := `, aud AS (INSERT INTO audit (task_id, step, from_state, to_state, at, attempt, engine_id, reason, task_from, task_to, task_reason)
			SELECT task_id, name, ?, ?, ?, attempt, ?, ?,
				CASE WHEN first THEN ? ELSE '' END, CASE WHEN first THEN ? ELSE '' END, CASE WHEN first THEN ? ELSE '' END
			FROM (SELECT s.task_id, s.name, s.attempt, s.idx,
				started.id IS NOT NULL AND row_number() OVER (PARTITION BY s.task_id ORDER BY s.idx) = 1 AS first
				FROM s LEFT JOIN started ON started.id = s.task_id) AS e
			ORDER BY task_id, idx)`
	const taskOf = ` CROSS JOIN LATERAL (SELECT input, workflow, version, traceparent FROM tasks WHERE id = %s.task_id OFFSET 0) t`
	// The results of each step's dependencies come with it (depResultsOf),
	// not in a statement of their own.
	q := `WITH ` + lead + take + `s AS (` + update + `),
		started AS (UPDATE tasks SET state = 'running', started_at = ? WHERE id = ANY(ARRAY(SELECT task_id FROM s)) AND (state || '') = 'pending'
			RETURNING id, input, workflow, version, traceparent)` + totals + audit + `
		SELECT s.*, COALESCE(st.input, t.input), COALESCE(st.workflow, t.workflow), COALESCE(st.version, t.version), COALESCE(st.traceparent, t.traceparent),
			` + depResultsOf + `, st.id IS NOT NULL` + totalsCols + granted
	if gated {
		q += `, true`
	}
	// A task the claim started comes back from its UPDATE; only the others
	// are read again.
	q += ` FROM s LEFT JOIN started st ON st.id = s.task_id
		LEFT JOIN LATERAL (SELECT input, workflow, version, traceparent FROM tasks WHERE id = s.task_id AND st.id IS NULL OFFSET 0) t ON true` + totalsJoin
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
		q += ` UNION ALL SELECT ` + qualify("x", stepColumns) + `, x.sort_key, t.input, t.workflow, t.version, t.traceparent, NULL, false` + none + `, false
			FROM steps x` + fmt.Sprintf(taskOf, "x") + ` WHERE x.id = (SELECT id FROM c LIMIT 1) AND NOT (SELECT open FROM g)`
	}
	return q
}

// readClaimed reads the rows of claim statement st (about n of them): the
// steps it claimed, with the indexes of their dependencies. shut: it
// claimed from its query of candidates and found the gate shut (gateShut).
func (t *txn) readClaimed(rows Rows, st claimStmt, n int, leaseID int64) (out []store.ClaimedStep, deps [][]int, shut bool, err error) {
	type claimedRow struct {
		sortKey int64
		task    claimedTask
		results sql.NullString // of its dependencies: depResultsOf
		started bool
		totals  [2]sql.NullInt64
		granted []string
		claimed bool
	}
	// One set of scan destinations for every row.
	var x stepScan
	var c claimedRow
	var input string
	dest := append(x.dest(), &c.sortKey)
	if t.s.d.WithWrites {
		dest = append(dest, &input, &c.task.workflow, &c.task.version, &c.task.traceparent, &c.results, &c.started)
	}
	if st.totaling {
		dest = append(dest, &c.totals[0], &c.totals[1])
	}
	if st.taking {
		dest = append(dest, &c.granted)
	}
	if st.gated {
		dest = append(dest, &c.claimed)
	}
	// Each row becomes its claimed step as it is read: the rows are large,
	// and a claim under a backlog reads a hundred of them.
	out = make([]store.ClaimedStep, 0, n)
	deps = make([][]int, 0, n)
	first := true
	err = each(rows, func(r Row) error {
		x, c, input = stepScan{}, claimedRow{}, ""
		if err := r.Scan(dest...); err != nil || shut {
			return err
		}
		if first {
			first = false
			if st.gated && !c.claimed {
				shut = true
				return nil
			}
			if st.taking {
				if err := t.rateTake.readGrants(c.granted); err != nil {
					return err
				}
			}
		}
		step := x.row()
		// The sort key is the time the step became ready less its priority's
		// aging credit.
		out = append(out, store.ClaimedStep{Step: step.Step, Fence: store.Fence{StepID: step.ID, Attempt: step.Attempts, LeaseID: leaseID},
			ReadyAt: time.UnixMicro(c.sortKey + int64(step.Priority)*t.s.aging)})
		deps = append(deps, step.deps)
		if c.totals[0].Valid {
			t.totaled(step.Namespace, c.started, limitTotals{c.totals[0].Int64, c.totals[1].Int64})
		}
		if t.s.d.WithWrites {
			c.task.input = json.RawMessage(input)
			c.task.set(&out[len(out)-1]) // the statement wrote the audit rows
			if len(step.deps) > 0 {
				return t.readDepResults(step.ID, c.results)
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, false, fmt.Errorf("claim steps: %w", err)
	}
	if shut {
		return nil, nil, true, nil
	}
	return out, deps, false, nil
}

// The reasons of a claim's audit entries.
const (
	reasonClaimed      = "claimed"
	reasonFirstClaimed = "first step claimed"
)

// claimedTask is the part of what a claimed step's handler sees that comes
// from its task.
type claimedTask struct {
	input                          json.RawMessage
	workflow, version, traceparent string
}

func (c claimedTask) set(s *store.ClaimedStep) {
	s.Input, s.Workflow, s.Version, s.TraceParent = c.input, c.workflow, c.version, c.traceparent
}

// claimContext starts the claimed steps' tasks and loads what the handlers
// see: the task input (unless claim did both already) and the results of
// dependencies by name.
func (t *txn) claimContext(claimed []store.ClaimedStep, deps [][]int) error {
	if !t.s.d.WithWrites {
		if err := t.startTasks(claimed, deps); err != nil {
			return err
		}
	}
	// The results of every claimed step's dependencies not read with its
	// claim statement, in one statement.
	var unread []int
	for i := range claimed {
		if len(deps[i]) == 0 {
			continue
		}
		claimed[i].Deps = make(map[string]json.RawMessage, len(deps[i]))
		if _, read := t.depResults[claimed[i].ID]; !read {
			unread = append(unread, i)
		}
	}
	if len(unread) > 0 {
		type dep struct{ claim, task, idx int64 } // a claimed step, its task, a dependency's index
		var pairs []dep
		for _, i := range unread {
			for _, d := range deps[i] {
				pairs = append(pairs, dep{claimed[i].ID, claimed[i].TaskID, int64(d)})
			}
		}
		from, args := rowset(t, "d", pairs,
			intCol("d_claim", func(d *dep) int64 { return d.claim }),
			intCol("d_task", func(d *dep) int64 { return d.task }),
			intCol("d_idx", func(d *dep) int64 { return d.idx }))
		rows, err := t.query(`SELECT d.d_claim, s.name, s.result, s.kind, s.idx FROM `+from+`
			JOIN steps s ON s.task_id = d.d_task AND s.idx = d.d_idx WHERE s.state != 'skipped'`, args...)
		if err != nil {
			return fmt.Errorf("load dependency results: %w", err)
		}
		if err := t.readDepRows(rows); err != nil {
			return err
		}
	}
	for i := range claimed {
		c := &claimed[i]
		for _, d := range t.depResults[c.ID] {
			c.Deps[d.name] = nullJSON(d.result)
			c.DependsOn = append(c.DependsOn, d.name)
			if d.kind == store.KindBatch {
				// A batch step's result is its items' results.
				var err error
				if c.Deps[d.name], err = t.batchResults(c.TaskID, d.idx); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// depResultsOf is a column of the claim statement's rows, where a
// statement's WITH may write: the results of the step's dependencies as a
// JSON array of [name, result, kind, index] in index order
// (readDepResults), or NULL where it has none. Skipped dependencies did
// not run: they have no result to pass on.
const depResultsOf = `CASE WHEN s.deps <> '' THEN (SELECT json_agg(json_build_array(d.name, d.result, d.kind, d.idx) ORDER BY d.idx)::text
	FROM steps d WHERE d.task_id = s.task_id AND d.idx = ANY(string_to_array(s.deps, ',')::bigint[]) AND d.state != 'skipped') END`

// depResult is the result of a dependency of a claimed step.
type depResult struct {
	name, kind string
	result     sql.NullString
	idx        int
}

// readDepResults reads the results of the dependencies of claimed step id
// as the claim statement returned them (depResultsOf) into t.depResults:
// none where NULL (every dependency skipped).
func (t *txn) readDepResults(id int64, col sql.NullString) error {
	if t.depResults == nil {
		t.depResults = map[int64][]depResult{}
	}
	if !col.Valid {
		t.depResults[id] = nil
		return nil
	}
	var got [][4]json.RawMessage
	if err := json.Unmarshal([]byte(col.String), &got); err != nil {
		return fmt.Errorf("load dependency results: %w", err)
	}
	results := make([]depResult, len(got))
	for i, g := range got {
		d := &results[i]
		var result *string
		if err := errors.Join(json.Unmarshal(g[0], &d.name), json.Unmarshal(g[1], &result),
			json.Unmarshal(g[2], &d.kind), json.Unmarshal(g[3], &d.idx)); err != nil {
			return fmt.Errorf("load dependency results: %w", err)
		}
		if result != nil {
			d.result = sql.NullString{String: *result, Valid: true}
		}
	}
	t.depResults[id] = results
	return nil
}

// readDepRows reads rows of dependency results (the claimed step's id,
// the dependency's name, result, kind and index) into t.depResults, each
// step's in index order.
func (t *txn) readDepRows(rows Rows) error {
	type row struct {
		step int64
		depResult
	}
	got, err := collect(rows, func(r Row) (row, error) {
		var d row
		err := r.Scan(&d.step, &d.name, &d.result, &d.kind, &d.idx)
		return d, err
	})
	if err != nil {
		return fmt.Errorf("load dependency results: %w", err)
	}
	sort.Slice(got, func(i, j int) bool {
		return got[i].step < got[j].step || (got[i].step == got[j].step && got[i].idx < got[j].idx)
	})
	if t.depResults == nil {
		t.depResults = map[int64][]depResult{}
	}
	for _, d := range got {
		t.depResults[d.step] = append(t.depResults[d.step], d.depResult)
	}
	return nil
}

// auditClaimed queues the audit entries of claimed steps where the claim
// statement could not write them: one a step, in the order of the tasks
// and their steps, the first claimed step of each task in started (those
// this claim started) carrying the task's start: the entries PostgreSQL's
// claim statement writes (claim).
func (t *txn) auditClaimed(claimed []store.ClaimedStep, started []int64) {
	order := make([]int, len(claimed))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool {
		x, y := &claimed[order[a]], &claimed[order[b]]
		return x.TaskID < y.TaskID || (x.TaskID == y.TaskID && x.Index < y.Index)
	})
	starts := make(map[int64]bool, len(started))
	for _, id := range started {
		starts[id] = true
	}
	for _, i := range order {
		c := &claimed[i]
		t.audit(c.TaskID, c.Name, string(state.StepReady), string(state.StepRunning), c.Attempts, reasonClaimed)
		if starts[c.TaskID] {
			// Folded onto the row just queued (foldAudit).
			t.audit(c.TaskID, "", string(state.TaskPending), string(state.TaskRunning), 0, reasonFirstClaimed)
			delete(starts, c.TaskID)
		}
	}
}

// startTasks starts the claimed steps' tasks whose first step this is and
// loads the task's part of what the handlers see, where claim could not.
// A step with dependencies belongs to a task that started when they ran,
// or, should they all have been skipped before any ran, to one still
// pending that the read below finds.
func (t *txn) startTasks(claimed []store.ClaimedStep, deps [][]int) error {
	var ids, mayStart []int64
	seen := map[int64]bool{}
	starting := map[int64]bool{}
	for i, c := range claimed {
		if !seen[c.TaskID] {
			seen[c.TaskID] = true
			ids = append(ids, c.TaskID)
		}
		if len(deps[i]) == 0 && !starting[c.TaskID] {
			starting[c.TaskID] = true
			mayStart = append(mayStart, c.TaskID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	if err := state.CheckTask(state.TaskPending, state.TaskRunning); err != nil {
		return err
	}
	type loaded struct {
		id    int64
		state string
		claimedTask
	}
	// Tasks whose first step this is start, and return what the handlers
	// see; the others (their steps ran before) are read.
	read := func(q string, ids []int64, args ...any) ([]loaded, error) {
		in, inArgs := t.idIn("id", ids)
		rows, err := t.query(fmt.Sprintf(q, in), append(args, inArgs...)...)
		if err != nil {
			return nil, err
		}
		return collect(rows, func(r Row) (loaded, error) {
			var l loaded
			var input string
			err := r.Scan(&l.id, &l.state, &input, &l.workflow, &l.version, &l.traceparent)
			l.input = json.RawMessage(input)
			return l, err
		})
	}
	start := func(ids []int64) ([]loaded, error) {
		got, err := read(`UPDATE tasks SET state = 'running', started_at = ? WHERE (state || '') = 'pending' AND %s
			RETURNING id, state, input, workflow, version, traceparent`, ids, t.now)
		if err != nil {
			return nil, fmt.Errorf("start tasks: %w", err)
		}
		return got, nil
	}
	var infos []loaded
	var started []int64
	if len(mayStart) > 0 {
		got, err := start(mayStart)
		if err != nil {
			return err
		}
		infos = got
	}
	seen = make(map[int64]bool, len(ids))
	for _, l := range infos {
		seen[l.id] = true
		started = append(started, l.id)
	}
	var rest []int64
	for _, id := range ids {
		if !seen[id] {
			rest = append(rest, id)
		}
	}
	if len(rest) > 0 {
		more, err := read(`SELECT id, state, input, workflow, version, traceparent FROM tasks WHERE %s`, rest)
		if err != nil {
			return fmt.Errorf("load tasks: %w", err)
		}
		var pending []int64
		for _, l := range more {
			if l.state == string(state.TaskPending) {
				pending = append(pending, l.id)
			} else {
				infos = append(infos, l)
			}
		}
		if len(pending) > 0 {
			got, err := start(pending)
			if err != nil {
				return err
			}
			for _, l := range got {
				started = append(started, l.id)
			}
			infos = append(infos, got...)
		}
	}
	t.auditClaimed(claimed, started)
	tasks := make(map[int64]claimedTask, len(infos))
	for _, l := range infos {
		tasks[l.id] = l.claimedTask
	}
	for i := range claimed {
		tasks[claimed[i].TaskID].set(&claimed[i])
	}
	return nil
}
