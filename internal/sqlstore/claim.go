package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"

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
//   - namespace concurrency limits (the operator's, held in the database,
//     and the engine's NamespaceCaps) count the namespace's running steps
//     under a lock and skip full namespaces in the query;
//   - concurrency keys of steps and workflows (limits.go) are checked on the
//     candidates the query returned, and full keys are skipped by the
//     query's next round.
//
// Nothing of this runs while no policy is set: the claim reads the policy
// version with the engine's state, in one statement it made anyway, and a
// candidate without keys costs one string comparison.

// claimRounds bounds how many times one claim selects candidates: a limit
// can fill up mid-batch, and the next round skips what is full.
const claimRounds = 3

// ClaimSteps claims up to p.Limit ready steps.
func (s *Store) ClaimSteps(ctx context.Context, p store.ClaimParams) ([]store.ClaimedStep, error) {
	if p.Limit <= 0 {
		return nil, nil
	}
	var claimed []store.ClaimedStep
	err := s.write(ctx, p.EngineID, func(t *txn) error {
		if !p.Now.IsZero() {
			t.now = p.Now.UnixMicro()
		}
		if t.s.d.ClaimPlan != "" {
			if _, err := t.exec(t.s.d.ClaimPlan); err != nil {
				return fmt.Errorf("claim: %w", err)
			}
		}
		// The engine's state and the version of the policies, in one
		// statement: the policies are read again only when they changed.
		var engineState sql.NullString
		var version int64
		err := t.queryRow(`SELECT (SELECT state FROM engines WHERE id = ?), COALESCE((SELECT version FROM policy_version WHERE id = 1), 0)`,
			p.EngineID).Scan(&engineState, &version)
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
		room, err := t.capRoom(pol.capsWith(p.Caps))
		if err != nil {
			return err
		}
		leaseID := p.LeaseID
		if leaseID == 0 {
			leaseID = rand.Int64N(1<<62) + 1
		}
		keys := newKeyRoom()
		var deps [][]int
		for round := range claimRounds {
			want := p.Limit - len(claimed)
			if want <= 0 {
				break
			}
			ids, admitted, err := t.candidates(want, p, pol, room, keys, round)
			if err != nil {
				return err
			}
			if len(ids) == 0 {
				break
			}
			got, gotDeps, err := t.claim(ids, leaseID)
			if err != nil {
				return err
			}
			claimed = append(claimed, got...)
			deps = append(deps, gotDeps...)
			if err := t.admitTasks(admitted); err != nil {
				return err
			}
		}
		return t.claimContext(claimed, deps)
	})
	if err != nil {
		return nil, err
	}
	return claimed, nil
}

// capRoom returns, for each capped namespace, how many more steps may run.
func (t *txn) capRoom(caps map[string]int) (map[string]int, error) {
	if len(caps) == 0 {
		return nil, nil
	}
	room := make(map[string]int, len(caps))
	names := make([]any, 0, len(caps))
	for ns, n := range caps {
		room[ns] = n
		names = append(names, ns)
	}
	if t.s.d.LockCap != "" {
		// Count and claim each capped namespace one engine at a time, the
		// locks always taken in the same order.
		sort.Slice(names, func(i, j int) bool { return names[i].(string) < names[j].(string) })
		for _, ns := range names {
			if _, err := t.exec(t.s.d.LockCap, "weft-cap:"+ns.(string)); err != nil {
				return nil, fmt.Errorf("lock cap of namespace %s: %w", ns, err)
			}
		}
	}
	rows, err := t.query(`SELECT namespace, count(*) FROM steps WHERE state = 'running' AND namespace IN (`+placeholders(len(names))+`) GROUP BY namespace`, names...)
	if err != nil {
		return nil, fmt.Errorf("count running steps: %w", err)
	}
	running, err := collect(rows, scanNamespaceRow)
	if err != nil {
		return nil, fmt.Errorf("count running steps: %w", err)
	}
	for _, r := range running {
		room[r.namespace] -= int(r.n)
	}
	return room, nil
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
}

// candidates selects the best ready steps, skipping paused targets, full
// namespaces and full keys, and keeps only as many of a capped namespace or
// a key as it has room for. admitted lists the tasks whose workflow limit
// the kept steps take a place of.
func (t *txn) candidates(want int, p store.ClaimParams, pol *policySet, room map[string]int, keys *keyRoom, round int) (ids []int64, admitted []int64, err error) {
	var full []string
	for ns, n := range room {
		if n <= 0 {
			full = append(full, ns)
		}
	}
	q, args := t.s.claimQuery(want, p, pol, full, keys)
	rows, err := t.query(q, args...)
	if err != nil {
		return nil, nil, fmt.Errorf("select ready steps: %w", err)
	}
	ready, err := collect(rows, func(r Row) (candidate, error) {
		var c candidate
		err := r.Scan(&c.id, &c.namespace, &c.taskID, &c.limitKey, &c.limitN, &c.taskKey, &c.taskN)
		return c, err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("select ready steps: %w", err)
	}
	keyed := false
	for _, c := range ready {
		if c.limitKey != "" || c.taskKey != "" {
			keyed = true
			break
		}
	}
	if keyed {
		// Only now, and only for the keys among the candidates: count
		// what runs under each (locked on PostgreSQL, see limits.go).
		if err := t.countKeys(ready, keys, round == 0); err != nil {
			return nil, nil, err
		}
	}
	ids = make([]int64, 0, len(ready))
	for _, c := range ready {
		if n, capped := room[c.namespace]; capped && n <= 0 {
			continue
		}
		if keyed {
			ok, admit := keys.take(c)
			if !ok {
				continue
			}
			if admit {
				admitted = append(admitted, c.taskID)
			}
		}
		if _, capped := room[c.namespace]; capped {
			room[c.namespace]--
		}
		ids = append(ids, c.id)
	}
	return ids, admitted, nil
}

// claimQuery is the query that picks the steps to claim: the best ready
// steps, in effective priority order, skipping paused targets, namespaces
// at their cap and full concurrency keys.
func (s *Store) claimQuery(want int, p store.ClaimParams, pol *policySet, full []string, keys *keyRoom) (string, []any) {
	q := `SELECT id, namespace, task_id, limit_key, limit_n, task_limit_key, task_limit_n FROM steps WHERE state = 'ready'`
	var args []any
	if p.TaskID != 0 {
		q += ` AND task_id = ?`
		args = append(args, p.TaskID)
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
	in(`namespace NOT IN`, full)
	if pol != nil {
		in(`namespace NOT IN`, pol.namespaces)
		for _, wf := range pol.workflows {
			q += ` AND NOT (namespace = ? AND workflow = ?)`
			args = append(args, wf[0], wf[1])
		}
	}
	if keys != nil {
		in(`limit_key NOT IN`, keys.fullSteps())
		in(`task_limit_key NOT IN`, keys.fullTasks())
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
	q, args := s.claimQuery(max(p.Limit, 1), p, nil, nil, nil)
	plan, err := s.explain(ctx, q, args...)
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
// alone.
func (t *txn) claim(ids []int64, leaseID int64) ([]store.ClaimedStep, [][]int, error) {
	args := []any{leaseID, t.engine, t.now, t.now}
	for _, id := range ids {
		args = append(args, id)
	}
	rows, err := t.query(`UPDATE steps SET state = 'running', sub = '', attempt = attempt + 1, lease_id = ?, engine_id = ?,
		started_at = ?, deadline = CASE WHEN run_timeout > 0 THEN ? + run_timeout END, expires_at = NULL, run_at = NULL, error = ''
		WHERE id IN (`+placeholders(len(ids))+`) RETURNING `+stepColumns, args...)
	if err != nil {
		return nil, nil, fmt.Errorf("claim steps: %w", err)
	}
	steps, err := collect(rows, scanStep)
	if err != nil {
		return nil, nil, fmt.Errorf("claim steps: %w", err)
	}
	out := make([]store.ClaimedStep, len(steps))
	deps := make([][]int, len(steps))
	for i, st := range steps {
		out[i] = store.ClaimedStep{Step: st.Step, Fence: store.Fence{StepID: st.ID, Attempt: st.Attempts, LeaseID: leaseID}}
		deps[i] = st.deps
		t.audit(st.TaskID, st.Name, string(state.StepReady), string(state.StepRunning), st.Attempts, "claimed")
	}
	return out, deps, nil
}

// claimContext starts the claimed steps' tasks and loads what the handlers
// see: the task input and the results of dependencies by name.
func (t *txn) claimContext(claimed []store.ClaimedStep, deps [][]int) error {
	type taskInfo struct {
		id                int64
		input             json.RawMessage
		workflow, version string
	}
	tasks := map[int64]*taskInfo{}
	var ids []any
	for _, c := range claimed {
		if _, ok := tasks[c.TaskID]; !ok {
			tasks[c.TaskID] = nil
			ids = append(ids, c.TaskID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	// Tasks whose first step this is start running.
	if err := state.CheckTask(state.TaskPending, state.TaskRunning); err != nil {
		return err
	}
	started, err := t.int64s(`UPDATE tasks SET state = 'running', started_at = ? WHERE state = 'pending' AND id IN (`+placeholders(len(ids))+`) RETURNING id`,
		append([]any{t.now}, ids...)...)
	if err != nil {
		return err
	}
	for _, id := range started {
		t.audit(id, "", string(state.TaskPending), string(state.TaskRunning), 0, "first step claimed")
	}
	rows, err := t.query(`SELECT id, input, workflow, version FROM tasks WHERE id IN (`+placeholders(len(ids))+`)`, ids...)
	if err != nil {
		return fmt.Errorf("load tasks: %w", err)
	}
	infos, err := collect(rows, func(r Row) (*taskInfo, error) {
		info := &taskInfo{}
		var input string
		if err := r.Scan(&info.id, &input, &info.workflow, &info.version); err != nil {
			return nil, err
		}
		info.input = json.RawMessage(input)
		return info, nil
	})
	if err != nil {
		return fmt.Errorf("load tasks: %w", err)
	}
	for _, info := range infos {
		tasks[info.id] = info
	}
	type depResult struct {
		name, kind string
		result     sql.NullString
		idx        int
	}
	for i := range claimed {
		c := &claimed[i]
		info := tasks[c.TaskID]
		c.Input, c.Workflow, c.Version = info.input, info.workflow, info.version
		if len(deps[i]) == 0 {
			continue
		}
		args := make([]any, 0, len(deps[i])+1)
		args = append(args, c.TaskID)
		for _, d := range deps[i] {
			args = append(args, d)
		}
		// Skipped dependencies did not run: they have no result to pass on.
		rows, err := t.query(`SELECT name, result, kind, idx FROM steps WHERE task_id = ? AND idx IN (`+placeholders(len(deps[i]))+`)
			AND state != 'skipped'`, args...)
		if err != nil {
			return fmt.Errorf("load dependency results: %w", err)
		}
		results, err := collect(rows, func(r Row) (depResult, error) {
			var d depResult
			err := r.Scan(&d.name, &d.result, &d.kind, &d.idx)
			return d, err
		})
		if err != nil {
			return fmt.Errorf("load dependency results: %w", err)
		}
		c.Deps = make(map[string]json.RawMessage, len(deps[i]))
		batches := map[string]int{}
		for _, d := range results {
			c.Deps[d.name] = nullJSON(d.result)
			c.DependsOn = append(c.DependsOn, d.name)
			if d.kind == store.KindBatch {
				batches[d.name] = d.idx
			}
		}
		for name, idx := range batches {
			if c.Deps[name], err = t.batchResults(c.TaskID, idx); err != nil {
				return err
			}
		}
	}
	return nil
}
