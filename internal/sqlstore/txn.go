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

	"github.com/weftrun/weft/internal/dag"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// txn is one write transaction with the helpers every state change uses: the
// audit log, the eligibility of steps and the cascade to children.
type txn struct {
	ctx     context.Context
	x       Querier
	owned   bool // the store began the transaction (not the caller)
	s       *Store
	now     int64
	engine  string
	readied int
	// notifyDeferred: steps became ready but the notification is left to
	// the end of the current window.
	notifyDeferred bool
	// notifyTaken: this transaction opened a window and carries its
	// notification.
	notifyTaken bool
	// audits are written in bulk before the transaction commits.
	audits []auditRow
}

// run applies fn, writes the queued audit rows and, if steps became ready,
// the dialect's notification.
func (t *txn) run(fn func(t *txn) error) error {
	if err := fn(t); err != nil {
		return err
	}
	if err := t.flushAudit(); err != nil {
		return err
	}
	if t.readied > 0 && t.s.d.Notify != "" {
		if t.owned {
			if !t.s.takeNotify() {
				t.notifyDeferred = true
				return nil
			}
			t.notifyTaken = true
		}
		if _, err := t.exec(t.s.d.Notify, t.s.d.NotifyChannel); err != nil {
			return fmt.Errorf("notify: %w", err)
		}
	}
	return nil
}

func (t *txn) exec(q string, args ...any) (Result, error) {
	return t.x.Exec(t.ctx, t.s.bind(q), args...)
}

func (t *txn) query(q string, args ...any) (Rows, error) {
	return t.x.Query(t.ctx, t.s.bind(q), args...)
}

func (t *txn) queryRow(q string, args ...any) Row {
	return t.x.QueryRow(t.ctx, t.s.bind(q), args...)
}

// auditRow is one audit entry to write.
type auditRow struct {
	taskID   int64
	step     string
	from, to string
	attempt  int
	reason   string
	engine   string
}

// flushAudit writes the queued audit entries: in one statement of arrays
// where the dialect has them (one statement text, whatever the count), else
// with multi-row inserts.
func (t *txn) flushAudit() error {
	const perInsert = 64
	entries := t.audits
	t.audits = nil
	if t.s.d.Arrays && len(entries) > 0 {
		n := len(entries)
		tasks, attempts := make([]int64, n), make([]int64, n)
		steps, froms, tos, engines, reasons := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		for i, e := range entries {
			tasks[i], steps[i], froms[i], tos[i], attempts[i], engines[i], reasons[i] = e.taskID, e.step, e.from, e.to, int64(e.attempt), e.engine, e.reason
		}
		_, err := t.exec(`INSERT INTO audit (task_id, step, from_state, to_state, at, attempt, engine_id, reason)
			SELECT u.task_id, u.step, u.from_state, u.to_state, ?, u.attempt, u.engine_id, u.reason
			FROM unnest(?::bigint[], ?::text[], ?::text[], ?::text[], ?::bigint[], ?::text[], ?::text[])
				AS u(task_id, step, from_state, to_state, attempt, engine_id, reason)`,
			t.now, tasks, steps, froms, tos, attempts, engines, reasons)
		if err != nil {
			return fmt.Errorf("audit: %w", err)
		}
		return nil
	}
	for len(entries) > 0 {
		n := min(len(entries), perInsert)
		args := make([]any, 0, 8*n)
		for _, e := range entries[:n] {
			args = append(args, e.taskID, e.step, e.from, e.to, t.now, e.attempt, e.engine, e.reason)
		}
		q := `INSERT INTO audit (task_id, step, from_state, to_state, at, attempt, engine_id, reason) VALUES ` +
			strings.Repeat("(?, ?, ?, ?, ?, ?, ?, ?), ", n-1) + `(?, ?, ?, ?, ?, ?, ?, ?)`
		if _, err := t.exec(q, args...); err != nil {
			return fmt.Errorf("audit: %w", err)
		}
		entries = entries[n:]
	}
	return nil
}

// audit queues one audit entry; the transaction writes the queue in bulk
// before it commits.
func (t *txn) audit(taskID int64, step string, from, to string, attempt int, reason string) {
	t.audits = append(t.audits, auditRow{taskID, step, from, to, attempt, reason, t.engine})
}

// moveStep changes one step's state with a compare-and-swap on from, after
// checking the edge against the state machine, and records it. set adds
// column assignments. It reports whether the row matched.
func (t *txn) moveStep(id, taskID int64, name string, from, to state.Step, attempt int, reason, set string, args ...any) (bool, error) {
	if err := state.CheckStep(from, to); err != nil {
		return false, fmt.Errorf("step %q of task %d: %w", name, taskID, err)
	}
	q := `UPDATE steps SET state = ?`
	if set != "" {
		q += ", " + set
	}
	q += ` WHERE id = ? AND state = ?`
	res, err := t.exec(q, append(append([]any{string(to)}, args...), id, string(from))...)
	if err != nil {
		return false, fmt.Errorf("step %q of task %d %s -> %s: %w", name, taskID, from, to, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return false, nil
	}
	t.audit(taskID, name, string(from), string(to), attempt, reason)
	return true, nil
}

// moveTask changes a task's state with a compare-and-swap and records it.
func (t *txn) moveTask(id int64, from, to state.Task, reason, set string, args ...any) (bool, error) {
	if err := state.CheckTask(from, to); err != nil {
		return false, fmt.Errorf("task %d: %w", id, err)
	}
	q := `UPDATE tasks SET state = ?`
	if set != "" {
		q += ", " + set
	}
	q += ` WHERE id = ? AND state = ?`
	res, err := t.exec(q, append(append([]any{string(to)}, args...), id, string(from))...)
	if err != nil {
		return false, fmt.Errorf("task %d %s -> %s: %w", id, from, to, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return false, nil
	}
	t.audit(id, "", string(from), string(to), 0, reason)
	return true, nil
}

// eligible moves a step whose dependencies are satisfied to ready, or to
// waiting when runAt is in the future.
func (t *txn) eligible(id, taskID int64, name string, from state.Step, priority int, ttl, runAt int64, reason string) error {
	var expires any
	if ttl > 0 {
		expires = max(runAt, t.now) + ttl
	}
	if runAt > t.now {
		_, err := t.moveStep(id, taskID, name, from, state.StepWaiting, 0, reason, `run_at = ?, expires_at = ?`, runAt, expires)
		return err
	}
	ok, err := t.moveStep(id, taskID, name, from, state.StepReady, 0, reason, `sort_key = ?, run_at = NULL, expires_at = ?`,
		t.now-int64(priority)*t.s.aging, expires)
	if ok {
		t.readied++
	}
	return err
}

// parentEnded updates a pending child's dependency counts and applies its
// trigger rule.
func (t *txn) parentEnded(taskID int64, child int, parent state.Step, parentName string) error {
	var ok, failed, skipped int
	switch {
	case parent.Succeeded():
		ok = 1
	case parent == state.StepSkipped:
		skipped = 1
	default:
		failed = 1
	}
	var id int64
	var name, deps, children string
	var c dag.Counts
	var priority, extra int
	var ttl, waitTimeout int64
	var rule, kind, signal string
	err := t.queryRow(`UPDATE steps SET deps_ok = deps_ok + ?, deps_failed = deps_failed + ?, deps_skipped = deps_skipped + ?
		WHERE task_id = ? AND idx = ? AND state = 'pending'
		RETURNING id, name, deps, children, deps_ok, deps_failed, deps_skipped, priority, ttl, trigger_rule, deps_extra, kind, signal, wait_timeout`,
		ok, failed, skipped, taskID, child).Scan(&id, &name, &deps, &children, &c.Succeeded, &c.Failed, &c.Skipped, &priority, &ttl, &rule, &extra, &kind, &signal, &waitTimeout)
	if errors.Is(err, sql.ErrNoRows) {
		return nil // not pending: cancelled or already decided
	}
	if err != nil {
		return fmt.Errorf("update dependents of task %d: %w", taskID, err)
	}
	c.Total = len(parseIdx(deps)) + extra
	switch dag.Decide(dag.Rule(rule), c) {
	case dag.Run:
		if kind == store.KindSignal {
			return t.beginWait(id, taskID, name, children, signal, time.Duration(waitTimeout)*time.Microsecond)
		}
		return t.eligible(id, taskID, name, state.StepPending, priority, ttl, 0, "dependencies satisfied")
	case dag.Skip:
		reason := fmt.Sprintf("dependency %q %s", parentName, parent)
		if rule != "" && rule != string(dag.AllSuccess) {
			reason = fmt.Sprintf("trigger rule %s is false (dependency %q %s)", rule, parentName, parent)
		}
		moved, err := t.moveStep(id, taskID, name, state.StepPending, state.StepSkipped, 0, reason, `finished_at = ?`, t.now)
		if err != nil || !moved {
			return err
		}
		return t.stepEnded(taskID, name, children, state.StepSkipped, "")
	}
	return nil
}

// The statements that submit a task. A key that exists in the namespace
// inserts nothing (also when a concurrent transaction holds it): the
// existing task is returned.
const (
	insertTask = `INSERT INTO tasks (namespace, workflow, version, state, input, priority, idempotency_key, run_at, good_until, created_at, remaining)
		VALUES (?, ?, ?, 'pending', ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (namespace, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING RETURNING id`
	insertStep = `INSERT INTO steps (task_id, idx, name, handler, namespace, state, deps, children, priority, sort_key, max_attempts, ttl, expires_at, run_at,
		kind, trigger_rule, signal, wait_timeout)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
)

// InsertTasks submits tasks in one transaction.
func (s *Store) InsertTasks(ctx context.Context, tasks []store.TaskInsert) ([]store.InsertResult, error) {
	var out []store.InsertResult
	err := s.write(ctx, "", func(t *txn) (err error) {
		out, err = t.insertTasks(tasks)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// InsertTasksIn submits tasks inside a transaction the caller began, so that
// they exist only if the caller commits it.
func (s *Store) InsertTasksIn(ctx context.Context, q Querier, tasks []store.TaskInsert) ([]store.InsertResult, error) {
	var out []store.InsertResult
	err := s.within(ctx, q, func(t *txn) (err error) {
		out, err = t.insertTasks(tasks)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// InsertTasksSQLTx submits tasks inside the caller's database/sql
// transaction.
func (s *Store) InsertTasksSQLTx(ctx context.Context, tx *sql.Tx, tasks []store.TaskInsert) ([]store.InsertResult, error) {
	return s.InsertTasksIn(ctx, &SQLQuerier{Tx: tx}, tasks)
}

func (t *txn) insertTasks(tasks []store.TaskInsert) ([]store.InsertResult, error) {
	out := make([]store.InsertResult, len(tasks))
	s := t.s
	for i, in := range tasks {
		if err := store.ValidateInsert(in); err != nil {
			return nil, err
		}
		input := in.Input
		if len(input) == 0 {
			input = json.RawMessage(`{}`)
		}
		runAt := t.now
		if !in.RunAt.IsZero() {
			runAt = in.RunAt.UnixMicro()
		}
		var goodUntil, key any
		if !in.GoodUntil.IsZero() {
			goodUntil = in.GoodUntil.UnixMicro()
		}
		if in.IdempotencyKey != "" {
			key = in.IdempotencyKey
		}
		var id int64
		err := t.queryRow(insertTask, in.Namespace, in.Workflow, in.Version, string(input), in.Priority, key, runAt, goodUntil, t.now, len(in.Steps)).Scan(&id)
		if errors.Is(err, sql.ErrNoRows) {
			existing, err := scanTask(t.queryRow(`SELECT `+taskColumns+` FROM tasks WHERE namespace = ? AND idempotency_key = ?`, in.Namespace, in.IdempotencyKey))
			if err != nil {
				return nil, fmt.Errorf("look up idempotency key %q: %w", in.IdempotencyKey, err)
			}
			out[i] = store.InsertResult{Task: existing, Duplicate: true}
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("insert task %d of %d: %w", i+1, len(tasks), err)
		}
		t.audit(id, "", "", string(state.TaskPending), 0, "submitted")
		children := make([][]int, len(in.Steps))
		for j, st := range in.Steps {
			for _, d := range st.Deps {
				children[d] = append(children[d], j)
			}
		}
		for j, st := range in.Steps {
			prio := in.Priority + st.Priority
			stt, sortKey := state.StepPending, int64(0)
			var expires, stepRunAt any
			ttl := st.TTL.Microseconds()
			if len(st.Deps) == 0 && st.Kind == store.KindSignal {
				// A new task has no signals yet: the step waits.
				stt, stepRunAt = state.StepWaiting, signalDeadline(max(runAt, t.now), st.SignalTimeout)
			} else if len(st.Deps) == 0 {
				if runAt > t.now {
					stt, stepRunAt = state.StepWaiting, runAt
				} else {
					stt, sortKey = state.StepReady, t.now-int64(prio)*s.aging
					t.readied++
				}
				if ttl > 0 {
					expires = max(runAt, t.now) + ttl
				}
			}
			maxAttempts := st.MaxAttempts
			if maxAttempts <= 0 {
				maxAttempts = 1
			}
			if _, err := t.exec(insertStep, id, j, st.Name, st.Handler, in.Namespace, string(stt), formatIdx(st.Deps), formatIdx(children[j]),
				prio, sortKey, maxAttempts, ttl, expires, stepRunAt, st.Kind, st.TriggerRule, st.Signal, st.SignalTimeout.Microseconds()); err != nil {
				return nil, fmt.Errorf("insert step %q of task %d: %w", st.Name, id, err)
			}
			t.audit(id, st.Name, "", string(stt), 0, "submitted")
		}
		created := time.UnixMicro(t.now)
		task := store.Task{ID: id, Namespace: in.Namespace, Workflow: in.Workflow, Version: in.Version, State: state.TaskPending,
			Input: input, Priority: in.Priority, IdempotencyKey: in.IdempotencyKey, RunAt: time.UnixMicro(runAt), CreatedAt: created}
		if !in.GoodUntil.IsZero() {
			g := in.GoodUntil
			task.GoodUntil = &g
		}
		out[i] = store.InsertResult{Task: task}
	}
	return out, nil
}

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
	defer rows.Close()
	for rows.Next() {
		var ns string
		var n int
		if err := rows.Scan(&ns, &n); err != nil {
			return nil, fmt.Errorf("count running steps: %w", err)
		}
		room[ns] -= n
	}
	return room, rows.Err()
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
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		var ns string
		if err := rows.Scan(&id, &ns); err != nil {
			return nil, fmt.Errorf("select ready steps: %w", err)
		}
		if n, capped := room[ns]; capped {
			if n <= 0 {
				continue
			}
			room[ns] = n - 1
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// claim marks the given ready steps running and returns them with the
// indexes of their dependencies.
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
	rows, err := s.read(ctx, s.d.Explain+" "+q, args...)
	if err != nil {
		return "", fmt.Errorf("explain claim: %w", err)
	}
	defer rows.Close()
	var plan strings.Builder
	vals := make([]any, max(s.d.ExplainColumns, 1))
	ptrs := make([]any, len(vals))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return "", fmt.Errorf("explain claim: %w", err)
		}
		// The plan line is the last column.
		fmt.Fprintf(&plan, "%v\n", vals[len(vals)-1])
	}
	return plan.String(), rows.Err()
}

// claim marks candidates running. They are still ready: this transaction
// locked them (FOR UPDATE) or is the only writer, so the update looks them
// up by primary key alone.
func (t *txn) claim(ids []int64, leaseID int64) ([]store.ClaimedStep, [][]int, error) {
	args := []any{leaseID, t.engine, t.now}
	for _, id := range ids {
		args = append(args, id)
	}
	rows, err := t.query(`UPDATE steps SET state = 'running', sub = '', attempt = attempt + 1, lease_id = ?, engine_id = ?,
		started_at = ?, expires_at = NULL, run_at = NULL, error = ''
		WHERE id IN (`+placeholders(len(ids))+`) RETURNING `+stepColumns, args...)
	if err != nil {
		return nil, nil, fmt.Errorf("claim steps: %w", err)
	}
	var out []store.ClaimedStep
	var deps [][]int
	for rows.Next() {
		st, d, err := scanStep(rows)
		if err != nil {
			rows.Close()
			return nil, nil, fmt.Errorf("scan claimed step: %w", err)
		}
		out = append(out, store.ClaimedStep{Step: st, Fence: store.Fence{StepID: st.ID, Attempt: st.Attempts, LeaseID: leaseID}})
		deps = append(deps, d)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("claim steps: %w", err)
	}
	for _, c := range out {
		t.audit(c.TaskID, c.Name, string(state.StepReady), string(state.StepRunning), c.Attempts, "claimed")
	}
	return out, deps, nil
}

// claimContext starts the claimed steps' tasks and loads what the handlers
// see: the task input and the results of dependencies by name.
func (t *txn) claimContext(claimed []store.ClaimedStep, deps [][]int) error {
	type taskInfo struct {
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
	for rows.Next() {
		var id int64
		var input string
		info := &taskInfo{}
		if err := rows.Scan(&id, &input, &info.workflow, &info.version); err != nil {
			rows.Close()
			return fmt.Errorf("load tasks: %w", err)
		}
		info.input = json.RawMessage(input)
		tasks[id] = info
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("load tasks: %w", err)
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
		c.Deps = make(map[string]json.RawMessage, len(deps[i]))
		batches := map[string]int{}
		for rows.Next() {
			var name, kind string
			var result sql.NullString
			var idx int
			if err := rows.Scan(&name, &result, &kind, &idx); err != nil {
				rows.Close()
				return fmt.Errorf("load dependency results: %w", err)
			}
			c.Deps[name] = nullJSON(result)
			c.DependsOn = append(c.DependsOn, name)
			if kind == store.KindBatch {
				batches[name] = idx
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("load dependency results: %w", err)
		}
		for name, idx := range batches {
			if c.Deps[name], err = t.batchResults(c.TaskID, idx); err != nil {
				return err
			}
		}
	}
	return nil
}

func nullJSON(v sql.NullString) json.RawMessage {
	if !v.Valid || v.String == "" {
		return json.RawMessage("null")
	}
	return json.RawMessage(v.String)
}

// CompleteSteps records outcomes in one transaction.
func (s *Store) CompleteSteps(ctx context.Context, outcomes []store.Outcome) ([]error, error) {
	results := make([]error, len(outcomes))
	engine := ""
	if len(outcomes) > 0 {
		engine = outcomes[0].EngineID
	}
	// Record in step order: engines completing steps of the same tasks
	// then lock their rows in the same order and cannot deadlock.
	order := make([]int, len(outcomes))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool { return outcomes[order[a]].Fence.StepID < outcomes[order[b]].Fence.StepID })
	err := s.write(ctx, engine, func(t *txn) error {
		// Plain outcomes of one engine go together; the rest one by one.
		var plain []store.Outcome
		var plainAt, rest []int
		for _, i := range order {
			if o := outcomes[i]; plainOutcome(o) && o.EngineID == engine {
				plain, plainAt = append(plain, o), append(plainAt, i)
			} else {
				rest = append(rest, i)
			}
		}
		held, err := t.finishMany(plain)
		if err != nil {
			return err
		}
		for j, i := range plainAt {
			if !held[j] {
				results[i] = fmt.Errorf("step %d attempt %d: %w", outcomes[i].Fence.StepID, outcomes[i].Fence.Attempt, store.ErrStaleLease)
			}
		}
		for _, i := range rest {
			o := outcomes[i]
			t.engine = o.EngineID
			ok, err := t.finish(o)
			if err != nil {
				return err
			}
			if !ok {
				results[i] = fmt.Errorf("step %d attempt %d: %w", o.Fence.StepID, o.Fence.Attempt, store.ErrStaleLease)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return results, nil
}

// finish records one outcome guarded by its fence; false means stale.
func (t *txn) finish(o store.Outcome) (bool, error) {
	var result any
	if len(o.Result) > 0 {
		result = string(o.Result)
	}
	to, set, args := o.State, "", []any(nil)
	switch o.State {
	case state.StepCompleted, state.StepFailed:
		set, args = `sub = '', result = ?, error = ?, finished_at = ?`, []any{result, o.Error, t.now}
		if o.Reason == "" {
			o.Reason = o.Error
		}
	case state.StepSkipped:
		set, args = `sub = '', error = '', finished_at = ?`, []any{t.now}
	case state.StepWaiting, state.StepReady:
		runAt := o.RunAt.UnixMicro()
		to = state.StepWaiting
		if o.RunAt.IsZero() || runAt <= t.now {
			to, runAt = state.StepReady, t.now
		}
		give := 0
		if o.Snooze {
			give = 1
		}
		set = `sub = '', error = ?, attempt = attempt - ?, run_at = ?, sort_key = ? - priority * ?, checkpoint = COALESCE(?, checkpoint)`
		args = []any{o.Error, give, nullIf(to == state.StepWaiting, runAt), runAt, t.s.aging, result}
	default:
		return false, fmt.Errorf("outcome state %q is not completed, failed or waiting", o.State)
	}
	if err := state.CheckStep(state.StepRunning, to); err != nil {
		return false, err
	}
	if o.Spawn != nil && o.State == state.StepCompleted {
		if msg, err := t.spawnTooLarge(o.Fence.StepID, o.Spawn); err != nil {
			return false, err
		} else if msg != "" {
			o.Spawn, to, o.Error, o.Reason, o.Result = nil, state.StepFailed, msg, msg, nil
			set, args = `sub = '', result = NULL, error = ?, finished_at = ?`, []any{msg, t.now}
		}
	}
	// One fenced compare-and-swap: the step must still be running under
	// exactly this attempt and lease.
	var taskID int64
	var name, children string
	err := t.queryRow(`UPDATE steps SET state = ?, `+set+` WHERE id = ? AND state = 'running' AND attempt = ? AND lease_id = ?
		RETURNING task_id, name, children`, append(append([]any{string(to)}, args...), o.Fence.StepID, o.Fence.Attempt, o.Fence.LeaseID)...).
		Scan(&taskID, &name, &children)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("record outcome of step %d: %w", o.Fence.StepID, err)
	}
	t.audit(taskID, name, string(state.StepRunning), string(to), o.Fence.Attempt, o.Reason)
	switch to {
	case state.StepReady:
		t.readied++
	case state.StepCompleted, state.StepFailed, state.StepSkipped:
		if err := t.dynamicOutcome(o, taskID, name, children, to); err != nil {
			return false, err
		}
		return true, t.stepEnded(taskID, name, children, to, o.Error)
	}
	return true, nil
}

func nullIf(cond bool, v int64) any {
	if !cond {
		return nil
	}
	return v
}

// ReleaseLease returns the steps running under one claim's lease to ready.
func (s *Store) ReleaseLease(ctx context.Context, engineID string, leaseID int64) (int, error) {
	n := 0
	err := s.write(ctx, engineID, func(t *txn) error {
		rows, err := t.query(`SELECT id, attempt FROM steps WHERE state = 'running' AND engine_id = ? AND lease_id = ?`, engineID, leaseID)
		if err != nil {
			return fmt.Errorf("find steps of lease %d: %w", leaseID, err)
		}
		var fences []store.Fence
		for rows.Next() {
			f := store.Fence{LeaseID: leaseID}
			if err := rows.Scan(&f.StepID, &f.Attempt); err != nil {
				rows.Close()
				return fmt.Errorf("find steps of lease %d: %w", leaseID, err)
			}
			fences = append(fences, f)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("find steps of lease %d: %w", leaseID, err)
		}
		for _, f := range fences {
			ok, err := t.finish(store.Outcome{Fence: f, EngineID: engineID, State: state.StepReady, Snooze: true,
				Reason: "released: the engine never learned that its claim succeeded"})
			if err != nil {
				return err
			}
			if ok {
				n++
			}
		}
		return nil
	})
	return n, err
}

// SaveCheckpoint stores a running step's checkpoint.
func (s *Store) SaveCheckpoint(ctx context.Context, f store.Fence, checkpoint json.RawMessage) error {
	return s.fenced(ctx, "", f, `checkpoint = ?`, string(checkpoint))
}

// SetDeferred sets or clears the deferred sub-status.
func (s *Store) SetDeferred(ctx context.Context, f store.Fence, engineID string, deferred bool) error {
	sub := ""
	if deferred {
		sub = state.SubDeferred
	}
	return s.fenced(ctx, engineID, f, `sub = ?`, sub)
}

func (s *Store) fenced(ctx context.Context, engineID string, f store.Fence, set string, args ...any) error {
	return s.write(ctx, engineID, func(t *txn) error {
		res, err := t.exec(`UPDATE steps SET `+set+` WHERE id = ? AND state = 'running' AND attempt = ? AND lease_id = ?`,
			append(args, f.StepID, f.Attempt, f.LeaseID)...)
		if err != nil {
			return fmt.Errorf("update step %d: %w", f.StepID, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("step %d attempt %d: %w", f.StepID, f.Attempt, store.ErrStaleLease)
		}
		return nil
	})
}

// Heartbeat extends the engine's lease and reports lost fences.
func (s *Store) Heartbeat(ctx context.Context, engineID string, now time.Time, inflight []store.Fence) ([]store.Fence, error) {
	var lost []store.Fence
	err := s.write(ctx, engineID, func(t *txn) error {
		res, err := t.exec(`UPDATE engines SET heartbeat_at = ? WHERE id = ? AND state = 'live'`, now.UnixMicro(), engineID)
		if err != nil {
			return fmt.Errorf("heartbeat: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("engine %s: %w", engineID, store.ErrEngineLost)
		}
		lost, err = t.lostFences(inflight)
		return err
	})
	return lost, err
}

func (t *txn) lostFences(inflight []store.Fence) ([]store.Fence, error) {
	if len(inflight) == 0 {
		return nil, nil
	}
	ids := make([]any, len(inflight))
	for i, f := range inflight {
		ids[i] = f.StepID
	}
	rows, err := t.query(`SELECT id, attempt, lease_id FROM steps WHERE state = 'running' AND id IN (`+placeholders(len(ids))+`)`, ids...)
	if err != nil {
		return nil, fmt.Errorf("check in-flight steps: %w", err)
	}
	defer rows.Close()
	held := map[store.Fence]bool{}
	for rows.Next() {
		var f store.Fence
		if err := rows.Scan(&f.StepID, &f.Attempt, &f.LeaseID); err != nil {
			return nil, fmt.Errorf("check in-flight steps: %w", err)
		}
		held[f] = true
	}
	var lost []store.Fence
	for _, f := range inflight {
		if !held[f] {
			lost = append(lost, f)
		}
	}
	return lost, rows.Err()
}

// Reap returns the steps of lapsed engines to the queue.
func (s *Store) Reap(ctx context.Context, now, staleBefore time.Time, dead []string, engineID string) (int, error) {
	n := 0
	err := s.write(ctx, engineID, func(t *txn) error {
		t.now = now.UnixMicro()
		args := []any{staleBefore.UnixMicro()}
		q := `SELECT id FROM engines WHERE state != 'dead' AND (heartbeat_at < ? OR state = 'stopped'`
		if len(dead) > 0 {
			q += ` OR id IN (` + placeholders(len(dead)) + `)`
			for _, d := range dead {
				args = append(args, d)
			}
		}
		engines, err := t.strings(q+`)`, args...)
		if err != nil {
			return err
		}
		if len(engines) == 0 {
			return nil
		}
		eargs := make([]any, len(engines))
		for i, e := range engines {
			eargs[i] = e
		}
		if _, err := t.exec(`UPDATE engines SET state = 'dead' WHERE id IN (`+placeholders(len(eargs))+`)`, eargs...); err != nil {
			return fmt.Errorf("mark engines dead: %w", err)
		}
		if _, err := t.exec(`DELETE FROM leaders WHERE engine_id IN (`+placeholders(len(eargs))+`)`, eargs...); err != nil {
			return fmt.Errorf("end the leases of dead engines: %w", err)
		}
		rows, err := t.query(`SELECT id, task_id, name, attempt, max_attempts, lease_id, engine_id FROM steps
			WHERE state = 'running' AND engine_id IN (`+placeholders(len(eargs))+`)`, eargs...)
		if err != nil {
			return fmt.Errorf("find steps of lapsed engines: %w", err)
		}
		type lapsed struct {
			fence        store.Fence
			taskID       int64
			name, engine string
			max          int
		}
		var steps []lapsed
		for rows.Next() {
			var l lapsed
			if err := rows.Scan(&l.fence.StepID, &l.taskID, &l.name, &l.fence.Attempt, &l.max, &l.fence.LeaseID, &l.engine); err != nil {
				rows.Close()
				return fmt.Errorf("find steps of lapsed engines: %w", err)
			}
			steps = append(steps, l)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("find steps of lapsed engines: %w", err)
		}
		for _, l := range steps {
			msg := fmt.Sprintf("lease lapsed: engine %s stopped heartbeating during attempt %d", l.engine, l.fence.Attempt)
			o := store.Outcome{Fence: l.fence, EngineID: engineID, State: state.StepReady, Error: msg, Reason: msg}
			if l.fence.Attempt >= l.max {
				o.State = state.StepFailed
			}
			if _, err := t.finish(o); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	return n, err
}

// Expire expires steps whose ttl passed and pending tasks whose good_until
// passed.
func (s *Store) Expire(ctx context.Context, now time.Time, engineID string) (int, error) {
	n := 0
	err := s.write(ctx, engineID, func(t *txn) error {
		t.now = now.UnixMicro()
		tasks, err := t.int64s(`SELECT id FROM tasks WHERE state = 'pending' AND good_until IS NOT NULL AND good_until <= ?`, t.now)
		if err != nil {
			return err
		}
		for _, id := range tasks {
			if _, err := t.endTask(id, state.TaskPending, state.TaskExpired, state.StepExpired, "good_until passed before the task started"); err != nil {
				return err
			}
			n++
		}
		rows, err := t.query(`SELECT id, task_id, name, state, children FROM steps
			WHERE expires_at IS NOT NULL AND expires_at <= ? AND state IN ('ready', 'waiting')`, t.now)
		if err != nil {
			return fmt.Errorf("find expired steps: %w", err)
		}
		type exp struct {
			id, task           int64
			name, st, children string
		}
		var steps []exp
		for rows.Next() {
			var e exp
			if err := rows.Scan(&e.id, &e.task, &e.name, &e.st, &e.children); err != nil {
				rows.Close()
				return fmt.Errorf("find expired steps: %w", err)
			}
			steps = append(steps, e)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("find expired steps: %w", err)
		}
		for _, e := range steps {
			ok, err := t.moveStep(e.id, e.task, e.name, state.Step(e.st), state.StepExpired, 0, "ttl passed before the step started",
				`finished_at = ?, expires_at = NULL`, t.now)
			if err != nil {
				return err
			}
			if ok {
				if err := t.stepEnded(e.task, e.name, e.children, state.StepExpired, "ttl passed before the step started"); err != nil {
					return err
				}
				n++
			}
		}
		return nil
	})
	return n, err
}

// endTask moves a task to a terminal state and every non-terminal step of it
// to stepTo, returning the fences of steps that were running.
func (t *txn) endTask(id int64, from, to state.Task, stepTo state.Step, reason string) ([]store.Fence, error) {
	ok, err := t.moveTask(id, from, to, reason, `finished_at = ?, remaining = 0`, t.now)
	if err != nil || !ok {
		return nil, err
	}
	rows, err := t.query(`SELECT id, name, state, attempt, lease_id FROM steps
		WHERE task_id = ? AND state IN ('pending', 'ready', 'running', 'waiting')`, id)
	if err != nil {
		return nil, fmt.Errorf("steps of task %d: %w", id, err)
	}
	type open struct {
		fence    store.Fence
		name, st string
	}
	var steps []open
	for rows.Next() {
		var o open
		if err := rows.Scan(&o.fence.StepID, &o.name, &o.st, &o.fence.Attempt, &o.fence.LeaseID); err != nil {
			rows.Close()
			return nil, fmt.Errorf("steps of task %d: %w", id, err)
		}
		steps = append(steps, o)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("steps of task %d: %w", id, err)
	}
	var running []store.Fence
	for _, o := range steps {
		if _, err := t.moveStep(o.fence.StepID, id, o.name, state.Step(o.st), stepTo, o.fence.Attempt, reason,
			`sub = '', finished_at = ?, expires_at = NULL`, t.now); err != nil {
			return nil, err
		}
		if state.Step(o.st) == state.StepRunning {
			running = append(running, o.fence)
		}
	}
	return running, nil
}

// Promote makes waiting steps whose run_at came ready.
func (s *Store) Promote(ctx context.Context, now time.Time, engineID string) (int, error) {
	n := 0
	err := s.write(ctx, engineID, func(t *txn) error {
		t.now = now.UnixMicro()
		timedOut, err := t.timeOutWaits()
		if err != nil {
			return err
		}
		rows, err := t.query(`UPDATE steps SET state = 'ready', sort_key = run_at - priority * ?, run_at = NULL
			WHERE state = 'waiting' AND run_at <= ? AND signal = '' RETURNING task_id, name, attempt`, t.s.aging, t.now)
		if err != nil {
			return fmt.Errorf("promote waiting steps: %w", err)
		}
		type woke struct {
			task    int64
			name    string
			attempt int
		}
		var steps []woke
		for rows.Next() {
			var w woke
			if err := rows.Scan(&w.task, &w.name, &w.attempt); err != nil {
				rows.Close()
				return fmt.Errorf("promote waiting steps: %w", err)
			}
			steps = append(steps, w)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("promote waiting steps: %w", err)
		}
		for _, w := range steps {
			t.audit(w.task, w.name, string(state.StepWaiting), string(state.StepReady), w.attempt, "run_at reached")
		}
		n = len(steps) + timedOut
		t.readied += len(steps)
		return nil
	})
	return n, err
}

// NextWake returns the earliest time something becomes due.
func (s *Store) NextWake(ctx context.Context) (time.Time, bool, error) {
	var next sql.NullInt64
	err := s.readRow(ctx, `SELECT min(v) FROM (
		SELECT min(run_at) AS v FROM steps WHERE state = 'waiting'
		UNION ALL SELECT min(expires_at) FROM steps WHERE expires_at IS NOT NULL
		UNION ALL SELECT min(good_until) FROM tasks WHERE state = 'pending' AND good_until IS NOT NULL) AS due`).Scan(&next)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("next wake: %w", err)
	}
	if !next.Valid {
		return time.Time{}, false, nil
	}
	return time.UnixMicro(next.Int64), true, nil
}

// CancelTask cancels a task and its open steps.
func (s *Store) CancelTask(ctx context.Context, id int64, engineID, reason string) ([]store.Fence, error) {
	if reason == "" {
		reason = "cancelled"
	}
	var running []store.Fence
	err := s.write(ctx, engineID, func(t *txn) error {
		var st string
		if err := t.queryRow(`SELECT state FROM tasks WHERE id = ?`, id).Scan(&st); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("task %d: %w", id, store.ErrNotFound)
			}
			return fmt.Errorf("cancel task %d: %w", id, err)
		}
		from := state.Task(st)
		if !state.CanTask(from, state.TaskCancelled) {
			return fmt.Errorf("task %d is %s and cannot be cancelled: %w", id, from, store.ErrConflict)
		}
		var err error
		running, err = t.endTask(id, from, state.TaskCancelled, state.StepCancelled, reason)
		return err
	})
	return running, err
}

// RetryTask moves a failed task back to running.
func (s *Store) RetryTask(ctx context.Context, id int64, engineID string) error {
	return s.write(ctx, engineID, func(t *txn) error {
		task, err := scanTask(t.queryRow(`SELECT `+taskColumns+` FROM tasks WHERE id = ?`, id))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("task %d: %w", id, store.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("retry task %d: %w", id, err)
		}
		if task.State != state.TaskFailed {
			return fmt.Errorf("task %d is %s, only failed tasks can be retried: %w", id, task.State, store.ErrConflict)
		}
		rows, err := t.query(`SELECT id, name, state, deps, priority, ttl, batch_of FROM steps WHERE task_id = ? ORDER BY idx`, id)
		if err != nil {
			return fmt.Errorf("steps of task %d: %w", id, err)
		}
		type row struct {
			id       int64
			name, st string
			deps     []int
			priority int
			ttl      int64
		}
		var steps []row
		items := map[int][]int{} // batch step index -> its items' indexes
		for rows.Next() {
			var r row
			var deps string
			var batchOf sql.NullInt64
			if err := rows.Scan(&r.id, &r.name, &r.st, &deps, &r.priority, &r.ttl, &batchOf); err != nil {
				rows.Close()
				return fmt.Errorf("steps of task %d: %w", id, err)
			}
			r.deps = parseIdx(deps)
			if batchOf.Valid {
				// Items of a batch count among the dependencies of the
				// batch step's children.
				items[int(batchOf.Int64)] = append(items[int(batchOf.Int64)], len(steps))
			}
			steps = append(steps, r)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("steps of task %d: %w", id, err)
		}
		if _, err := t.moveTask(id, state.TaskFailed, state.TaskRunning, "retried", `finished_at = NULL, error = '', failed = 0`); err != nil {
			return err
		}
		// Failed and expired steps run again; skipped ones wait for their
		// dependencies anew, with counts recomputed from the new states.
		for i := range steps {
			r := &steps[i]
			switch state.Step(r.st) {
			case state.StepFailed, state.StepExpired:
				if _, err := t.moveStep(r.id, id, r.name, state.Step(r.st), state.StepReady, 0, "task retried",
					`attempt = 0, error = '', result = NULL, finished_at = NULL, sort_key = ?`, t.now-int64(r.priority)*t.s.aging); err != nil {
					return err
				}
				r.st = string(state.StepReady)
				t.readied++
			case state.StepSkipped:
				if _, err := t.moveStep(r.id, id, r.name, state.StepSkipped, state.StepPending, 0, "task retried", `finished_at = NULL`); err != nil {
					return err
				}
				r.st = string(state.StepPending)
			}
		}
		remaining := 0
		for _, r := range steps {
			if !state.Step(r.st).Terminal() {
				remaining++
			}
			if state.Step(r.st) != state.StepPending {
				continue
			}
			c := dependencyCounts(r.deps, items, func(i int) state.Step { return state.Step(steps[i].st) })
			if _, err := t.exec(`UPDATE steps SET deps_ok = ?, deps_failed = ?, deps_skipped = ? WHERE id = ?`, c.Succeeded, c.Failed, c.Skipped, r.id); err != nil {
				return fmt.Errorf("reset dependency counts: %w", err)
			}
		}
		if _, err := t.exec(`UPDATE tasks SET remaining = ? WHERE id = ?`, remaining, id); err != nil {
			return fmt.Errorf("reset task counts: %w", err)
		}
		return nil
	})
}

// dependencyCounts counts how a step's dependencies ended, the items of a
// batch dependency counting among them (items maps a batch step's index to
// its items' indexes); stateOf gives a step's state by index.
func dependencyCounts(deps []int, items map[int][]int, stateOf func(int) state.Step) dag.Counts {
	var c dag.Counts
	for _, d := range deps {
		for _, i := range append([]int{d}, items[d]...) {
			c.Total++
			switch ps := stateOf(i); {
			case ps.Succeeded():
				c.Succeeded++
			case ps == state.StepSkipped:
				c.Skipped++
			case ps.Terminal():
				c.Failed++
			}
		}
	}
	return c
}

func (t *txn) strings(q string, args ...any) ([]string, error) {
	rows, err := t.query(q, args...)
	if err != nil {
		return nil, fmt.Errorf("%w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, fmt.Errorf("%w", err)
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

func (t *txn) int64s(q string, args ...any) ([]int64, error) {
	rows, err := t.query(q, args...)
	if err != nil {
		return nil, fmt.Errorf("%w", err)
	}
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var v int64
		if err := rows.Scan(&v); err != nil {
			return nil, fmt.Errorf("%w", err)
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

func placeholders(n int) string {
	if n <= 0 {
		return "NULL"
	}
	return strings.Repeat("?, ", n-1) + "?"
}
