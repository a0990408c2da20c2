package sqlstore

import (
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/weftrun/weft/internal/dag"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// This file holds what the server adds to the store: API keys, operator
// actions on single steps, and the counts behind metrics and admission.

// CreateAPIKey records a new API key.
func (s *Store) CreateAPIKey(ctx context.Context, k store.APIKey) error {
	if k.ID == "" || len(k.Hash) == 0 {
		return errors.New("api key needs an id and a hash")
	}
	return s.write(ctx, "", func(t *txn) error {
		created := k.CreatedAt
		if created.IsZero() {
			created = time.UnixMicro(t.now)
		}
		res, err := t.exec(`INSERT INTO api_keys (id, name, hash, permissions, created_at) VALUES (?, ?, ?, ?, ?)
			ON CONFLICT (id) DO NOTHING`,
			k.ID, k.Name, hex.EncodeToString(k.Hash), strings.Join(k.Permissions, ","), created.UnixMicro())
		if err != nil {
			return fmt.Errorf("insert api key %s: %w", k.ID, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("api key %s exists: %w", k.ID, store.ErrConflict)
		}
		return nil
	})
}

const apiKeyColumns = `id, name, hash, permissions, created_at, revoked_at`

func scanAPIKey(sc interface{ Scan(...any) error }) (store.APIKey, error) {
	var k store.APIKey
	var hash, perms string
	var created int64
	var revoked sql.NullInt64
	if err := sc.Scan(&k.ID, &k.Name, &hash, &perms, &created, &revoked); err != nil {
		return k, err
	}
	h, err := hex.DecodeString(hash)
	if err != nil {
		return k, fmt.Errorf("api key %s: stored hash is not hex: %w", k.ID, err)
	}
	k.Hash = h
	if perms != "" {
		k.Permissions = strings.Split(perms, ",")
	}
	k.CreatedAt = time.UnixMicro(created)
	k.RevokedAt = optTime(revoked)
	return k, nil
}

// GetAPIKey returns a key by id.
func (s *Store) GetAPIKey(ctx context.Context, id string) (*store.APIKey, error) {
	k, err := scanAPIKey(s.readRow(ctx, `SELECT `+apiKeyColumns+` FROM api_keys WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("api key %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get api key %s: %w", id, err)
	}
	return &k, nil
}

// ListAPIKeys returns every key, oldest first.
func (s *Store) ListAPIKeys(ctx context.Context) ([]store.APIKey, error) {
	rows, err := s.read(ctx, `SELECT `+apiKeyColumns+` FROM api_keys ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("list api keys: %w", err)
	}
	defer rows.Close()
	var out []store.APIKey
	for rows.Next() {
		k, err := scanAPIKey(rows)
		if err != nil {
			return nil, fmt.Errorf("scan api key: %w", err)
		}
		out = append(out, k)
	}
	return out, rows.Err()
}

// RevokeAPIKey marks a key revoked.
func (s *Store) RevokeAPIKey(ctx context.Context, id string) error {
	return s.write(ctx, "", func(t *txn) error {
		var n int
		if err := t.queryRow(`SELECT count(*) FROM api_keys WHERE id = ?`, id).Scan(&n); err != nil {
			return fmt.Errorf("look up api key %s: %w", id, err)
		}
		if n == 0 {
			return fmt.Errorf("api key %s: %w", id, store.ErrNotFound)
		}
		if _, err := t.exec(`UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL`, t.now, id); err != nil {
			return fmt.Errorf("revoke api key %s: %w", id, err)
		}
		return nil
	})
}

// GetStep returns one step with its dependencies named.
func (s *Store) GetStep(ctx context.Context, id int64) (*store.Step, error) {
	st, deps, err := scanStep(s.readRow(ctx, `SELECT `+stepColumns+` FROM steps WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("step %d: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get step %d: %w", id, err)
	}
	if len(deps) == 0 {
		return &st, nil
	}
	rows, err := s.read(ctx, `SELECT idx, name FROM steps WHERE task_id = ?`, st.TaskID)
	if err != nil {
		return nil, fmt.Errorf("name dependencies of step %d: %w", id, err)
	}
	defer rows.Close()
	byIdx := map[int]string{}
	for rows.Next() {
		var i int
		var name string
		if err := rows.Scan(&i, &name); err != nil {
			return nil, fmt.Errorf("name dependencies of step %d: %w", id, err)
		}
		byIdx[i] = name
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("name dependencies of step %d: %w", id, err)
	}
	for _, d := range deps {
		st.DependsOn = append(st.DependsOn, byIdx[d])
	}
	return &st, nil
}

// opStep is what an operator action needs to know of each step of a task.
type opStep struct {
	id       int64
	name     string
	st       state.Step
	deps     []int
	children string
	priority int
	ttl      int64
	rule     dag.Rule
	batchOf  int // for a batch item, its batch step's index; else -1
}

// operandTask loads the task of a step and every step of it, in index
// order, and returns the index of the step.
func (t *txn) operandTask(stepID int64) (taskID int64, ts state.Task, steps []opStep, target int, err error) {
	var st string
	if err = t.queryRow(`SELECT s.task_id, t.state FROM steps s JOIN tasks t ON t.id = s.task_id WHERE s.id = ?`, stepID).Scan(&taskID, &st); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return 0, "", nil, 0, fmt.Errorf("step %d: %w", stepID, store.ErrNotFound)
		}
		return 0, "", nil, 0, fmt.Errorf("step %d: %w", stepID, err)
	}
	rows, err := t.query(`SELECT id, name, state, deps, children, priority, ttl, trigger_rule, batch_of FROM steps WHERE task_id = ? ORDER BY idx`, taskID)
	if err != nil {
		return 0, "", nil, 0, fmt.Errorf("steps of task %d: %w", taskID, err)
	}
	defer rows.Close()
	target = -1
	for rows.Next() {
		var o opStep
		var sst, deps, rule string
		var batchOf sql.NullInt64
		if err := rows.Scan(&o.id, &o.name, &sst, &deps, &o.children, &o.priority, &o.ttl, &rule, &batchOf); err != nil {
			return 0, "", nil, 0, fmt.Errorf("steps of task %d: %w", taskID, err)
		}
		o.st, o.deps, o.rule, o.batchOf = state.Step(sst), parseIdx(deps), dag.Rule(rule), -1
		if o.rule == "" {
			o.rule = dag.AllSuccess
		}
		if batchOf.Valid {
			o.batchOf = int(batchOf.Int64)
		}
		if o.id == stepID {
			target = len(steps)
		}
		steps = append(steps, o)
	}
	if err := rows.Err(); err != nil {
		return 0, "", nil, 0, fmt.Errorf("steps of task %d: %w", taskID, err)
	}
	return taskID, state.Task(st), steps, target, nil
}

// RetryStep makes a failed or expired step ready again.
func (s *Store) RetryStep(ctx context.Context, id int64, engineID string) error {
	return s.write(ctx, engineID, func(t *txn) error {
		taskID, ts, steps, target, err := t.operandTask(id)
		if err != nil {
			return err
		}
		o := steps[target]
		if o.st != state.StepFailed && o.st != state.StepExpired {
			return fmt.Errorf("step %q of task %d is %s, only failed or expired steps can be retried: %w", o.name, taskID, o.st, store.ErrConflict)
		}
		return t.reopen(taskID, ts, steps, target, func() error {
			_, err := t.moveStep(o.id, taskID, o.name, o.st, state.StepReady, 0, "step retried by an operator",
				`attempt = 0, error = '', result = NULL, finished_at = NULL, expires_at = NULL, sort_key = ?`, t.now-int64(o.priority)*t.s.aging)
			t.readied++
			return err
		})
	})
}

// ResolveStep ends a step by an operator's hand.
func (s *Store) ResolveStep(ctx context.Context, r store.StepResolution) error {
	reason := r.Reason
	if reason == "" {
		reason = "resolved by an operator"
	}
	var result any
	if len(r.Result) > 0 {
		result = string(r.Result)
	}
	return s.write(ctx, r.EngineID, func(t *txn) error {
		taskID, ts, steps, target, err := t.operandTask(r.StepID)
		if err != nil {
			return err
		}
		o := steps[target]
		switch o.st {
		case state.StepFailed, state.StepExpired:
			return t.reopen(taskID, ts, steps, target, func() error {
				_, err := t.moveStep(o.id, taskID, o.name, o.st, state.StepResolved, 0, reason,
					`result = ?, finished_at = ?, expires_at = NULL`, result, t.now)
				return err
			})
		case state.StepPending, state.StepReady, state.StepWaiting:
			if ts.Terminal() {
				return fmt.Errorf("task %d is %s: %w", taskID, ts, store.ErrConflict)
			}
			moved, err := t.moveStep(o.id, taskID, o.name, o.st, state.StepResolved, 0, reason,
				`result = ?, finished_at = ?, expires_at = NULL, run_at = NULL`, result, t.now)
			if err != nil {
				return err
			}
			if !moved {
				return fmt.Errorf("step %q of task %d changed meanwhile: %w", o.name, taskID, store.ErrConflict)
			}
			return t.stepEnded(taskID, o.name, o.children, state.StepResolved, "")
		default:
			return fmt.Errorf("step %q of task %d is %s and cannot be resolved: %w", o.name, taskID, o.st, store.ErrConflict)
		}
	})
}

// reopen applies move to a failed or expired step (making it ready or
// resolved), returns the steps skipped only because of it to pending,
// recomputes the dependency counts and the task's counters, makes ready what
// the change satisfied, and moves a failed task back to running (or to
// completed when nothing is left to run).
func (t *txn) reopen(taskID int64, ts state.Task, steps []opStep, target int, move func() error) error {
	if ts != state.TaskFailed && ts != state.TaskRunning && ts != state.TaskPending {
		return fmt.Errorf("task %d is %s: %w", taskID, ts, store.ErrConflict)
	}
	children := make([][]int, len(steps))
	for i, s := range steps {
		for _, d := range s.deps {
			children[d] = append(children[d], i)
		}
	}
	// The skipped descendants of the target, less those that another
	// failure keeps skipped.
	reopened := map[int]bool{}
	queue := []int{target}
	for len(queue) > 0 {
		i := queue[0]
		queue = queue[1:]
		for _, c := range children[i] {
			if steps[c].st == state.StepSkipped && !reopened[c] {
				reopened[c] = true
				queue = append(queue, c)
			}
		}
	}
	for changed := true; changed; {
		changed = false
		for c := range reopened {
			for _, p := range steps[c].deps {
				ps := steps[p].st
				ok := p == target || reopened[p] || ps.Succeeded() || !ps.Terminal()
				if !ok {
					delete(reopened, c)
					changed = true
					break
				}
			}
		}
	}
	if err := move(); err != nil {
		return err
	}
	// Read the target's new state back rather than assume it.
	var newState string
	if err := t.queryRow(`SELECT state FROM steps WHERE id = ?`, steps[target].id).Scan(&newState); err != nil {
		return fmt.Errorf("step %q of task %d: %w", steps[target].name, taskID, err)
	}
	steps[target].st = state.Step(newState)
	for c := range reopened {
		if _, err := t.moveStep(steps[c].id, taskID, steps[c].name, state.StepSkipped, state.StepPending, 0,
			fmt.Sprintf("dependency %q reopened", steps[target].name), `finished_at = NULL`); err != nil {
			return err
		}
		steps[c].st = state.StepPending
	}
	items := map[int][]int{} // a batch step's index -> its items' indexes
	for i, s := range steps {
		if s.batchOf >= 0 {
			items[s.batchOf] = append(items[s.batchOf], i)
		}
	}
	var ready []int
	for i, s := range steps {
		if s.st != state.StepPending {
			continue
		}
		c := dependencyCounts(s.deps, items, func(i int) state.Step { return steps[i].st })
		if _, err := t.exec(`UPDATE steps SET deps_ok = ?, deps_failed = ?, deps_skipped = ? WHERE id = ?`, c.Succeeded, c.Failed, c.Skipped, s.id); err != nil {
			return fmt.Errorf("reset dependency counts: %w", err)
		}
		if reopened[i] && dag.Decide(s.rule, c) == dag.Run {
			ready = append(ready, i)
		}
	}
	remaining, failed := 0, 0
	for _, s := range steps {
		if !s.st.Terminal() {
			remaining++
		}
		if s.st == state.StepFailed || s.st == state.StepExpired {
			failed++
		}
	}
	reason := fmt.Sprintf("step %q %s by an operator", steps[target].name, steps[target].st)
	clearErr := ""
	if failed == 0 {
		clearErr = ", error = ''"
	}
	if _, err := t.exec(`UPDATE tasks SET remaining = ?, failed = ?`+clearErr+` WHERE id = ?`, remaining, failed, taskID); err != nil {
		return fmt.Errorf("reset task counts: %w", err)
	}
	if ts == state.TaskFailed && (remaining > 0 || failed == 0) {
		if _, err := t.moveTask(taskID, state.TaskFailed, state.TaskRunning, reason, `finished_at = NULL`); err != nil {
			return err
		}
		ts = state.TaskRunning
	}
	if remaining == 0 && !ts.Terminal() {
		to := state.TaskCompleted
		if failed > 0 {
			to = state.TaskFailed
		}
		if _, err := t.moveTask(taskID, ts, to, reason, `finished_at = ?`, t.now); err != nil {
			return err
		}
	}
	for _, i := range ready {
		s := steps[i]
		if err := t.eligible(s.id, taskID, s.name, state.StepPending, s.priority, s.ttl, 0, "dependencies satisfied"); err != nil {
			return err
		}
	}
	return nil
}

// QueueDepth counts unfinished steps by namespace and state.
func (s *Store) QueueDepth(ctx context.Context) ([]store.QueueCount, error) {
	rows, err := s.read(ctx, `SELECT namespace, state, count(*) FROM steps
		WHERE state IN ('pending', 'ready', 'running', 'waiting') GROUP BY namespace, state ORDER BY namespace, state`)
	if err != nil {
		return nil, fmt.Errorf("queue depth: %w", err)
	}
	defer rows.Close()
	var out []store.QueueCount
	for rows.Next() {
		var c store.QueueCount
		var st string
		if err := rows.Scan(&c.Namespace, &st, &c.Count); err != nil {
			return nil, fmt.Errorf("queue depth: %w", err)
		}
		c.State = state.Step(st)
		out = append(out, c)
	}
	return out, rows.Err()
}

// CountUnfinishedTasks counts pending and running tasks up to limit.
func (s *Store) CountUnfinishedTasks(ctx context.Context, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	var n int
	err := s.readRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM tasks WHERE state IN ('pending', 'running') LIMIT ?) AS unfinished`, limit).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count unfinished tasks: %w", err)
	}
	return n, nil
}
