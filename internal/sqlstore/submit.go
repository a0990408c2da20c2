package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// This file holds the submission of tasks: one transaction for any number
// of tasks, in the store's own transaction or in the caller's.

// The statements that submit a task. A key that exists in the namespace
// inserts nothing (also when a concurrent transaction holds it): the
// existing task is returned.
const (
	insertTask = `INSERT INTO tasks (namespace, workflow, version, state, input, priority, idempotency_key, run_at, good_until, created_at, remaining, limit_key, limit_n, tags, traceparent)
		VALUES (?, ?, ?, 'pending', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (namespace, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING RETURNING id`
	insertStep = `INSERT INTO steps (task_id, idx, name, handler, namespace, state, deps, children, priority, sort_key, max_attempts, ttl, expires_at, run_at,
		kind, trigger_rule, signal, wait_timeout, run_timeout, workflow, limit_key, limit_n, task_limit_key, task_limit_n, preemptible, rate_key, rate_n, rate_per,
		breaker_key, breaker_n, breaker_cooldown)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
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
		if err := store.ValidateTags(in.Tags); err != nil {
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
			goodUntil, t.timed = in.GoodUntil.UnixMicro(), true
		}
		if in.IdempotencyKey != "" {
			key = in.IdempotencyKey
		}
		var id int64
		err := t.queryRow(insertTask, in.Namespace, in.Workflow, in.Version, string(input), in.Priority, key, runAt, goodUntil, t.now, len(in.Steps), in.LimitKey, in.Limit, encodeTags(in.Tags), in.TraceParent).Scan(&id)
		var superseded *heldKey
		if errors.Is(err, sql.ErrNoRows) && in.Supersede {
			// The task holding the key gives it up; this one takes it.
			if superseded, err = t.releaseKey(in.Namespace, in.IdempotencyKey); err != nil {
				return nil, err
			}
			err = t.queryRow(insertTask, in.Namespace, in.Workflow, in.Version, string(input), in.Priority, key, runAt, goodUntil, t.now, len(in.Steps), in.LimitKey, in.Limit, encodeTags(in.Tags), in.TraceParent).Scan(&id)
		}
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
		if err := t.insertTags(id, in.Tags); err != nil {
			return nil, err
		}
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
			if stepRunAt != nil || expires != nil {
				t.timed = true
			}
			maxAttempts := st.MaxAttempts
			if maxAttempts <= 0 {
				maxAttempts = 1
			}
			bk, bn, bc := breakerColumns(st.Breaker)
			if _, err := t.exec(insertStep, id, j, st.Name, st.Handler, in.Namespace, string(stt), formatIdx(st.Deps), formatIdx(children[j]),
				prio, sortKey, maxAttempts, ttl, expires, stepRunAt, st.Kind, st.TriggerRule, st.Signal, st.SignalTimeout.Microseconds(), st.Timeout.Microseconds(),
				in.Workflow, st.LimitKey, st.Limit, in.LimitKey, in.Limit, boolInt(st.Preemptible), st.RateKey, st.Rate.Limit, st.Rate.Per.Microseconds(), bk, bn, bc); err != nil {
				return nil, fmt.Errorf("insert step %q of task %d: %w", st.Name, id, err)
			}
			t.audit(id, st.Name, "", string(stt), 0, "submitted")
		}
		created := time.UnixMicro(t.now)
		task := store.Task{ID: id, Namespace: in.Namespace, Workflow: in.Workflow, Version: in.Version, State: state.TaskPending,
			Input: input, Priority: in.Priority, IdempotencyKey: in.IdempotencyKey, RunAt: time.UnixMicro(runAt), CreatedAt: created, Tags: in.Tags}
		if !in.GoodUntil.IsZero() {
			g := in.GoodUntil
			task.GoodUntil = &g
		}
		out[i] = store.InsertResult{Task: task}
		if superseded != nil {
			if err := t.supersede(*superseded, id, in.IdempotencyKey); err != nil {
				return nil, err
			}
			out[i].Superseded = superseded.id
		}
	}
	return out, nil
}
