package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"time"

	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// This file holds the claim: the one statement that picks the best ready
// steps, marks them running under a lease, and loads what their handlers
// see. Scheduling policies are predicates of that statement and a cheap
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
// version with the engine's state, in one statement it made anyway, and a
// candidate under no limit costs a map lookup and two string comparisons.

// claimRounds bounds how many times one claim selects candidates: a limit
// can fill up mid-batch, and the next round skips what is full.
const claimRounds = 3

// ClaimSteps claims up to p.Limit ready steps.
func (s *Store) ClaimSteps(ctx context.Context, p store.ClaimParams) ([]store.ClaimedStep, error) {
	if p.Limit <= 0 {
		return nil, nil
	}
	var claimed []store.ClaimedStep
	var deferred map[string]*store.RateDeferral
	held := false
	err := s.write(ctx, p.EngineID, func(t *txn) error {
		if !p.Now.IsZero() {
			t.now = p.Now.UnixMicro()
		}
		// The engine's state and the version of the policies, in one
		// statement that also steers the planner for the claim's next
		// statements (ClaimPlan): the policies are read again only when
		// they changed.
		var engineState, plan, locked sql.NullString
		var version int64
		q := `SELECT (SELECT state FROM engines WHERE id = ?), COALESCE((SELECT version FROM policy_version WHERE id = 1), 0), `
		args := []any{p.EngineID}
		if t.s.d.ClaimPlan != "" {
			q += t.s.d.ClaimPlan
		} else {
			q += "NULL"
		}
		// While the policies last read hold weights, the fair shares' lock
		// rides on this statement too (fairQuery takes it itself when they
		// were set since).
		if t.s.d.Lock != "" && s.cachedWeights() {
			q += ", " + t.s.d.Lock
			args = append(args, fairLock)
			t.fairLocked = true
		} else {
			q += ", NULL"
		}
		err := t.queryRow(q, args...).Scan(&engineState, &version, &plan, &locked)
		switch {
		case err != nil:
			return fmt.Errorf("check engine %s: %w", p.EngineID, err)
		case engineState.Valid && engineState.String != "live":
			return fmt.Errorf("engine %s is %s: %w", p.EngineID, engineState.String, store.ErrEngineLost)
		}
		pol, err := t.policies(version)
		if err != nil {
			return err
		}
		if pol.all {
			return nil // everything is paused
		}
		leaseID := p.LeaseID
		if leaseID == 0 {
			leaseID = rand.Int64N(1<<62) + 1
		}
		keys := newKeyRoom(pol.capsWith(p.Caps))
		keys.brk = newBreakerRoom(pol, t.now)
		rates := &rateClaim{}
		var deps [][]int
		for round := range claimRounds {
			want := p.Limit - len(claimed)
			if want <= 0 {
				break
			}
			ids, more, err := t.candidates(want, p, pol, keys, rates, round)
			if err != nil {
				return err
			}
			held = held || keys.heldBack
			if len(ids) > 0 {
				got, gotDeps, err := t.claim(ids, leaseID)
				if err != nil {
					return err
				}
				claimed = append(claimed, got...)
				deps = append(deps, gotDeps...)
			}
			if !more {
				break
			}
		}
		deferred = rates.deferred
		return t.claimContext(claimed, deps)
	})
	if err != nil {
		return nil, err
	}
	reportDeferred(p, deferred)
	if held && p.Held != nil {
		p.Held()
	}
	return claimed, nil
}

// namespaceRow is a namespace with a number: a count of its steps, or the
// id of one of them.
type namespaceRow struct {
	n         int64
	namespace string
}

// scanNamespaceRow reads a namespace and a number, in that order.
func scanNamespaceRow(r Row) (namespaceRow, error) {
	var v namespaceRow
	err := r.Scan(&v.namespace, &v.n)
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
func (t *txn) candidates(want int, p store.ClaimParams, pol *policySet, keys *keyRoom, rates *rateClaim, round int) (ids []int64, more bool, err error) {
	var q string
	var args []any
	fair := false
	if round == 0 && pol != nil && pol.weights != nil {
		if q, args, fair, err = t.fairQuery(want, p, pol, keys); err != nil {
			return nil, false, err
		}
	}
	if !fair {
		q, args = t.s.claimQuery(want, p, pol, keys)
	}
	rows, err := t.query(q, args...)
	if err != nil {
		return nil, false, fmt.Errorf("select ready steps: %w", err)
	}
	ready, err := collect(rows, func(r Row) (candidate, error) {
		var c candidate
		err := r.Scan(&c.id, &c.namespace, &c.taskID, &c.limitKey, &c.limitN, &c.taskKey, &c.taskN, &c.rateKey, &c.rateN, &c.ratePer, &c.breakerKey)
		return c, err
	})
	if err != nil {
		return nil, false, fmt.Errorf("select ready steps: %w", err)
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
	if kept, err = t.probes(kept, keys.brk); err != nil {
		return nil, false, err
	}
	// Rate limits last: tokens are taken only for what else may run. A
	// probe its rate defers gives its place back.
	if kept, _, err = t.rated(kept, pol, rates, round); err != nil {
		return nil, false, err
	}
	if err := t.unprobed(kept, keys.brk); err != nil {
		return nil, false, err
	}
	// Slots a namespace of the fair share could not use go to the next
	// round.
	return idsOf(kept), (fair && len(kept) < want) || (len(ready) == want && len(kept) < len(ready)), nil
}

func idsOf(cs []candidate) []int64 {
	ids := make([]int64, len(cs))
	for i, c := range cs {
		ids[i] = c.id
	}
	return ids
}

// claimQuery is the query that picks the steps to claim: the best ready
// steps, in effective priority order, skipping paused targets, namespaces
// at their cap and full concurrency keys.
func (s *Store) claimQuery(want int, p store.ClaimParams, pol *policySet, keys *keyRoom) (string, []any) {
	q := `SELECT id, namespace, task_id, limit_key, limit_n, task_limit_key, task_limit_n, rate_key, rate_n, rate_per, breaker_key FROM steps WHERE state = 'ready'`
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
	in := func(cond string, vals []string) {
		if len(vals) == 0 {
			return
		}
		q += ` AND ` + cond + ` (` + placeholders(len(vals)) + `)`
		for _, v := range vals {
			args = append(args, v)
		}
	}
	if pol != nil {
		in(`namespace NOT IN`, pol.namespaces)
		for _, wf := range pol.workflows {
			q += ` AND NOT (namespace = ? AND workflow = ?)`
			args = append(args, wf[0], wf[1])
		}
	}
	if keys != nil {
		in(`namespace NOT IN`, full(keys.ns))
		in(`limit_key NOT IN`, full(keys.step))
		in(`breaker_key NOT IN`, keys.brk.held())
		// A full workflow limit holds back the tasks that have not
		// started; the running ones (no more than the limit) go on.
		if tasks := full(keys.task); len(tasks) > 0 {
			ph := placeholders(len(tasks))
			q += ` AND (task_limit_key NOT IN (` + ph + `) OR task_id IN (SELECT id FROM tasks WHERE state = 'running' AND limit_key IN (` + ph + `)))`
			for range 2 {
				for _, k := range tasks {
					args = append(args, k)
				}
			}
		}
	}
	in(`handler IN`, p.Handlers)
	in(`namespace IN`, p.Namespaces)
	if p.Handlers != nil && len(p.Handlers) == 0 {
		q += ` AND 1 = 0` // an empty list of handlers claims nothing
	}
	if p.Namespaces != nil && len(p.Namespaces) == 0 {
		q += ` AND 1 = 0`
	}
	q += ` ORDER BY sort_key LIMIT ?`
	if s.d.ClaimLock != "" {
		q += " " + s.d.ClaimLock
	}
	return q, append(args, want)
}

// ExplainClaim returns the database's plan for the query that selects steps
// to claim, so tests and operators can check that the claim reads the ready
// index in order, whatever the backlog.
func (s *Store) ExplainClaim(ctx context.Context, p store.ClaimParams) (string, error) {
	q, args := s.claimQuery(max(p.Limit, 1), p, nil, nil)
	plan, err := s.explain(ctx, q, args...)
	if err != nil {
		return "", fmt.Errorf("explain claim: %w", err)
	}
	return plan, nil
}

// ExplainClaimRun runs the query that selects steps to claim as a claim
// does, in a transaction of the claim's planner settings that is rolled
// back, and returns its plan with what it did where the database tells
// (EXPLAIN ANALYZE on PostgreSQL; the plan alone elsewhere): for operators
// and the bench to see what a claim reads at a given depth.
func (s *Store) ExplainClaimRun(ctx context.Context, p store.ClaimParams) (string, error) {
	prefix := s.d.ExplainAnalyze
	if prefix == "" {
		prefix = s.d.Explain
	}
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return "", fmt.Errorf("explain claim: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if s.d.ClaimPlan != "" {
		var plan string
		if err := tx.QueryRow(ctx, `SELECT `+s.d.ClaimPlan).Scan(&plan); err != nil {
			return "", fmt.Errorf("explain claim: %w", err)
		}
	}
	q, args := s.claimQuery(max(p.Limit, 1), p, nil, nil)
	rows, err := tx.Query(ctx, s.bind(prefix+" "+q), args...)
	if err != nil {
		return "", fmt.Errorf("explain claim: %w", err)
	}
	plan, err := s.planLines(rows)
	if err != nil {
		return "", fmt.Errorf("explain claim: %w", err)
	}
	return plan, nil
}

// explain returns the database's plan for a query, one line per row.
func (s *Store) explain(ctx context.Context, q string, args ...any) (string, error) {
	rows, err := s.read(ctx, s.d.Explain+" "+q, args...)
	if err != nil {
		return "", err
	}
	return s.planLines(rows)
}

// planLines reads the rows of an EXPLAIN, the plan line last in each.
func (s *Store) planLines(rows Rows) (string, error) {
	vals := make([]any, max(s.d.ExplainColumns, 1))
	ptrs := make([]any, len(vals))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	lines, err := collect(rows, func(r Row) (string, error) {
		if err := r.Scan(ptrs...); err != nil {
			return "", err
		}
		// The plan line is the last column.
		return fmt.Sprint(vals[len(vals)-1]), nil
	})
	if err != nil {
		return "", err
	}
	var plan strings.Builder
	for _, l := range lines {
		plan.WriteString(l)
		plan.WriteByte('\n')
	}
	return plan.String(), nil
}

// claim marks candidates running and returns them with the indexes of their
// dependencies. They are still ready: this transaction locked them (FOR
// UPDATE) or is the only writer, so the update looks them up by primary key
// alone. Where the database allows it, the same statement starts their
// tasks and loads the task's part of what the handlers see (claimContext
// does the rest).
func (t *txn) claim(ids []int64, leaseID int64) ([]store.ClaimedStep, [][]int, error) {
	in, inArgs := t.idIn("id", ids)
	update := `UPDATE steps SET state = 'running', sub = '', attempt = attempt + 1, lease_id = ?, engine_id = ?,
		started_at = ?, deadline = CASE WHEN run_timeout > 0 THEN ? + run_timeout END, expires_at = NULL, run_at = NULL, error = ''
		WHERE ` + in + ` RETURNING ` + stepColumns + `, sort_key`
	args := append([]any{leaseID, t.engine, t.now, t.now}, inArgs...)
	q := update
	if t.s.d.WithWrites {
		if err := state.CheckTask(state.TaskPending, state.TaskRunning); err != nil {
			return nil, nil, err
		}
		q = `WITH s AS (` + update + `),
			started AS (UPDATE tasks SET state = 'running', started_at = ? WHERE id = ANY(ARRAY(SELECT task_id FROM s)) AND state = 'pending' RETURNING id)
			SELECT s.*, t.input, t.workflow, t.version, t.traceparent, started.id IS NOT NULL
			FROM s CROSS JOIN LATERAL (SELECT input, workflow, version, traceparent FROM tasks WHERE id = s.task_id OFFSET 0) t
			LEFT JOIN started ON started.id = s.task_id`
		args = append(args, t.now)
	}
	rows, err := t.query(q, args...)
	if err != nil {
		return nil, nil, fmt.Errorf("claim steps: %w", err)
	}
	type claimedRow struct {
		stepRow
		sortKey int64
		task    claimedTask
		started bool
	}
	steps, err := collect(rows, func(r Row) (claimedRow, error) {
		var x stepScan
		var c claimedRow
		dest := append(x.dest(), &c.sortKey)
		var input string
		if t.s.d.WithWrites {
			dest = append(dest, &input, &c.task.workflow, &c.task.version, &c.task.traceparent, &c.started)
		}
		if err := r.Scan(dest...); err != nil {
			return claimedRow{}, err
		}
		c.stepRow, c.task.input = x.row(), json.RawMessage(input)
		return c, nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("claim steps: %w", err)
	}
	out := make([]store.ClaimedStep, len(steps))
	deps := make([][]int, len(steps))
	started := map[int64]bool{}
	for i, st := range steps {
		// The sort key is the time the step became ready less its priority's
		// aging credit.
		out[i] = store.ClaimedStep{Step: st.Step, Fence: store.Fence{StepID: st.ID, Attempt: st.Attempts, LeaseID: leaseID},
			ReadyAt: time.UnixMicro(st.sortKey + int64(st.Priority)*t.s.aging)}
		deps[i] = st.deps
		t.audit(st.TaskID, st.Name, string(state.StepReady), string(state.StepRunning), st.Attempts, "claimed")
		if t.s.d.WithWrites {
			st.task.set(&out[i])
			if st.started && !started[st.TaskID] {
				started[st.TaskID] = true
				t.audit(st.TaskID, "", string(state.TaskPending), string(state.TaskRunning), 0, "first step claimed")
			}
		}
	}
	return out, deps, nil
}

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
		if err := t.startTasks(claimed); err != nil {
			return err
		}
	}
	// The results of every claimed step's dependencies, in one statement.
	var rows [][]any
	for i := range claimed {
		if len(deps[i]) > 0 {
			claimed[i].Deps = make(map[string]json.RawMessage, len(deps[i]))
		}
		for _, d := range deps[i] {
			rows = append(rows, []any{int64(i), claimed[i].TaskID, int64(d)})
		}
	}
	if len(rows) == 0 {
		return nil
	}
	from, args := t.rowset("d", []column{{"d_claim", colInt}, {"d_task", colInt}, {"d_idx", colInt}}, rows)
	// Skipped dependencies did not run: they have no result to pass on.
	join := `JOIN steps s ON s.task_id = d.d_task AND s.idx = d.d_idx WHERE s.state != 'skipped'`
	if t.s.d.Lateral {
		join = `CROSS JOIN LATERAL (SELECT name, result, kind, idx FROM steps WHERE task_id = d.d_task AND idx = d.d_idx AND state != 'skipped' OFFSET 0) s`
	}
	q, err := t.query(`SELECT d.d_claim, s.name, s.result, s.kind, s.idx FROM `+from+` `+join, args...) // ordered below: the claim's planner settings rule out a sort
	if err != nil {
		return fmt.Errorf("load dependency results: %w", err)
	}
	type depResult struct {
		claim      int
		name, kind string
		result     sql.NullString
		idx        int
	}
	results, err := collect(q, func(r Row) (depResult, error) {
		var d depResult
		err := r.Scan(&d.claim, &d.name, &d.result, &d.kind, &d.idx)
		return d, err
	})
	if err != nil {
		return fmt.Errorf("load dependency results: %w", err)
	}
	sort.Slice(results, func(i, j int) bool {
		a, b := results[i], results[j]
		return a.claim < b.claim || (a.claim == b.claim && a.idx < b.idx)
	})
	for _, d := range results {
		c := &claimed[d.claim]
		c.Deps[d.name] = nullJSON(d.result)
		c.DependsOn = append(c.DependsOn, d.name)
		if d.kind == store.KindBatch {
			// A batch step's result is its items' results.
			if c.Deps[d.name], err = t.batchResults(c.TaskID, d.idx); err != nil {
				return err
			}
		}
	}
	return nil
}

// startTasks starts the claimed steps' tasks whose first step this is and
// loads the task's part of what the handlers see, where claim could not.
func (t *txn) startTasks(claimed []store.ClaimedStep) error {
	var ids []int64
	seen := map[int64]bool{}
	for _, c := range claimed {
		if !seen[c.TaskID] {
			seen[c.TaskID] = true
			ids = append(ids, c.TaskID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	if err := state.CheckTask(state.TaskPending, state.TaskRunning); err != nil {
		return err
	}
	// Tasks whose first step this is start, and return what the handlers
	// see; the others (their steps ran before) are read.
	type loaded struct {
		id int64
		claimedTask
	}
	scan := func(r Row) (loaded, error) {
		var l loaded
		var input string
		if err := r.Scan(&l.id, &input, &l.workflow, &l.version, &l.traceparent); err != nil {
			return l, err
		}
		l.input = json.RawMessage(input)
		return l, nil
	}
	in, inArgs := t.idIn("id", ids)
	rows, err := t.query(`UPDATE tasks SET state = 'running', started_at = ? WHERE state = 'pending' AND `+in+`
		RETURNING id, input, workflow, version, traceparent`, append([]any{t.now}, inArgs...)...)
	if err != nil {
		return fmt.Errorf("start tasks: %w", err)
	}
	infos, err := collect(rows, scan)
	if err != nil {
		return fmt.Errorf("start tasks: %w", err)
	}
	seen = make(map[int64]bool, len(infos))
	for _, l := range infos {
		seen[l.id] = true
		t.audit(l.id, "", string(state.TaskPending), string(state.TaskRunning), 0, "first step claimed")
	}
	if len(infos) < len(ids) {
		rest := make([]int64, 0, len(ids)-len(infos))
		for _, id := range ids {
			if !seen[id] {
				rest = append(rest, id)
			}
		}
		in, inArgs := t.idIn("id", rest)
		rows, err := t.query(`SELECT id, input, workflow, version, traceparent FROM tasks WHERE `+in, inArgs...)
		if err != nil {
			return fmt.Errorf("load tasks: %w", err)
		}
		more, err := collect(rows, scan)
		if err != nil {
			return fmt.Errorf("load tasks: %w", err)
		}
		infos = append(infos, more...)
	}
	tasks := make(map[int64]claimedTask, len(infos))
	for _, l := range infos {
		tasks[l.id] = l.claimedTask
	}
	for i := range claimed {
		tasks[claimed[i].TaskID].set(&claimed[i])
	}
	return nil
}
