package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"time"

	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// This file holds the claim: the one statement that picks the best ready
// steps (within namespace caps), marks them running under a lease, and
// loads what their handlers see.

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
		var engineState string
		err := t.queryRow(`SELECT state FROM engines WHERE id = ?`, p.EngineID).Scan(&engineState)
		switch {
		case err == nil && engineState != "live":
			return fmt.Errorf("engine %s is %s: %w", p.EngineID, engineState, store.ErrEngineLost)
		case err != nil && !errors.Is(err, sql.ErrNoRows):
			return fmt.Errorf("check engine %s: %w", p.EngineID, err)
		}
		room, err := t.capRoom(p.Caps)
		if err != nil {
			return err
		}
		leaseID := p.LeaseID
		if leaseID == 0 {
			leaseID = rand.Int64N(1<<62) + 1
		}
		var deps [][]int
		for range 3 { // a capped namespace can fill up mid-batch; look again
			want := p.Limit - len(claimed)
			if want <= 0 {
				break
			}
			ids, err := t.candidates(want, p, room)
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

// candidates selects the best ready steps, skipping namespaces at their cap,
// and keeps only as many of a capped namespace as it has room for.
func (t *txn) candidates(want int, p store.ClaimParams, room map[string]int) ([]int64, error) {
	var full []string
	for ns, n := range room {
		if n <= 0 {
			full = append(full, ns)
		}
	}
	q, args := t.s.claimQuery(want, p, full)
	rows, err := t.query(q, args...)
	if err != nil {
		return nil, fmt.Errorf("select ready steps: %w", err)
	}
	ready, err := collect(rows, func(r Row) (namespaceRow, error) {
		var v namespaceRow
		err := r.Scan(&v.n, &v.namespace)
		return v, err
	})
	if err != nil {
		return nil, fmt.Errorf("select ready steps: %w", err)
	}
	ids := make([]int64, 0, len(ready))
	for _, r := range ready {
		if n, capped := room[r.namespace]; capped {
			if n <= 0 {
				continue
			}
			room[r.namespace] = n - 1
		}
		ids = append(ids, r.n)
	}
	return ids, nil
}

// claimQuery is the query that picks the steps to claim: the best ready
// steps, in effective priority order, skipping namespaces at their cap.
func (s *Store) claimQuery(want int, p store.ClaimParams, full []string) (string, []any) {
	q := `SELECT id, namespace FROM steps WHERE state = 'ready'`
	var args []any
	if p.TaskID != 0 {
		q += ` AND task_id = ?`
		args = append(args, p.TaskID)
	}
	if len(full) > 0 {
		q += ` AND namespace NOT IN (` + placeholders(len(full)) + `)`
		for _, ns := range full {
			args = append(args, ns)
		}
	}
	if p.Handlers != nil {
		q += ` AND handler IN (` + placeholders(len(p.Handlers)) + `)`
		for _, h := range p.Handlers {
			args = append(args, h)
		}
	}
	if p.Namespaces != nil {
		q += ` AND namespace IN (` + placeholders(len(p.Namespaces)) + `)`
		for _, ns := range p.Namespaces {
			args = append(args, ns)
		}
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
	q, args := s.claimQuery(max(p.Limit, 1), p, nil)
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
		WHERE id IN (`+placeholders(len(ids))+`) RETURNING `+stepColumns+`, sort_key`, args...)
	if err != nil {
		return nil, nil, fmt.Errorf("claim steps: %w", err)
	}
	type claimedRow struct {
		stepRow
		sortKey int64
	}
	steps, err := collect(rows, func(r Row) (claimedRow, error) {
		var x stepScan
		var sortKey int64
		if err := r.Scan(append(x.dest(), &sortKey)...); err != nil {
			return claimedRow{}, err
		}
		return claimedRow{x.row(), sortKey}, nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("claim steps: %w", err)
	}
	out := make([]store.ClaimedStep, len(steps))
	deps := make([][]int, len(steps))
	for i, st := range steps {
		// The sort key is the time the step became ready less its priority's
		// aging credit.
		out[i] = store.ClaimedStep{Step: st.Step, Fence: store.Fence{StepID: st.ID, Attempt: st.Attempts, LeaseID: leaseID},
			ReadyAt: time.UnixMicro(st.sortKey + int64(st.Priority)*t.s.aging)}
		deps[i] = st.deps
		t.audit(st.TaskID, st.Name, string(state.StepReady), string(state.StepRunning), st.Attempts, "claimed")
	}
	return out, deps, nil
}

// claimContext starts the claimed steps' tasks and loads what the handlers
// see: the task input and the results of dependencies by name.
func (t *txn) claimContext(claimed []store.ClaimedStep, deps [][]int) error {
	type taskInfo struct {
		id                             int64
		input                          json.RawMessage
		workflow, version, traceparent string
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
	rows, err := t.query(`SELECT id, input, workflow, version, traceparent FROM tasks WHERE id IN (`+placeholders(len(ids))+`)`, ids...)
	if err != nil {
		return fmt.Errorf("load tasks: %w", err)
	}
	infos, err := collect(rows, func(r Row) (*taskInfo, error) {
		info := &taskInfo{}
		var input string
		if err := r.Scan(&info.id, &input, &info.workflow, &info.version, &info.traceparent); err != nil {
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
		c.Input, c.Workflow, c.Version, c.TraceParent = info.input, info.workflow, info.version, info.traceparent
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
