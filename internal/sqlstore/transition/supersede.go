package transition

import (
	"database/sql"
	"errors"
	"fmt"

	"github.com/weftrun/weft/state"
)

// This file holds the supersede strategy of submissions: a task submitted
// with an idempotency key that exists takes the key from the task that
// held it, which is cancelled if it has not finished.

// heldKey is the task that held an idempotency key.
type heldKey struct {
	id int64
	st state.Task
}

// releaseKey takes an idempotency key from the task holding it (locking
// its row) and returns that task; nil when none holds it any more.
func (t *submitTx) releaseKey(namespace, key string) (*heldKey, error) {
	// One supersede of a key at a time: two that both found the key held
	// would each take it from the task the other just gave it to, locking
	// that task's row and steps in opposite orders (a deadlock). The next
	// one reads who holds the key once the one before it committed.
	if err := t.Lock("idempotency key " + namespace + "/" + key); err != nil {
		return nil, err
	}
	if t.H.Dialect.ClaimLock() != "" {
		// Claims and completions lock a task's steps before the task:
		// take the holder's steps first too, or a claim of one of them
		// and this transaction wait for each other.
		if _, err := t.Exec(`SELECT id FROM steps WHERE task_id IN (SELECT id FROM tasks WHERE namespace = ? AND idempotency_key = ?)
			ORDER BY id FOR UPDATE`, namespace, key); err != nil {
			return nil, fmt.Errorf("lock the steps of the task holding idempotency key %q: %w", key, err)
		}
	}
	var h heldKey
	var st string
	err := t.QueryRow(`UPDATE tasks SET idempotency_key = NULL WHERE namespace = ? AND idempotency_key = ? RETURNING id, state`, namespace, key).
		Scan(&h.id, &st)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("release idempotency key %q: %w", key, err)
	}
	h.st = state.Task(st)
	return &h, nil
}

// supersede records that task by took old's key: old is cancelled, with
// its children, if it has not finished; its audit names the new task
// either way. Running handlers of old stop when their engines next
// heartbeat.
func (t *submitTx) supersede(old heldKey, by int64, key string) error {
	reason := fmt.Sprintf("superseded by task %d (idempotency key %q)", by, key)
	if old.st.Terminal() {
		t.Audit(old.id, "", string(old.st), string(old.st), 0, reason)
		return nil
	}
	_, err := t.EndTask(old.id, old.st, state.TaskCancelled, state.StepCancelled, reason)
	return err
}
