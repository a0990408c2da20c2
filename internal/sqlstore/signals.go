package sqlstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/weftrun/weft/internal/sqlstore/sqldb"
	"github.com/weftrun/weft/internal/sqlstore/sqltx"
	"github.com/weftrun/weft/internal/sqlstore/transition"
	"github.com/weftrun/weft/store"
)

// This file holds the Store's signal delivery (transition/signals.go holds
// the durable waits).

// Signal delivers a signal to a task.
func (s *lifecycle) Signal(ctx context.Context, taskID int64, name string, payload json.RawMessage, engineID string) (bool, error) {
	if name == "" {
		return false, errors.New("signal: a name is required")
	}
	if len(payload) == 0 {
		payload = json.RawMessage("null")
	}
	if !json.Valid(payload) {
		return false, fmt.Errorf("signal %q: payload is not valid JSON", name)
	}
	delivered := false
	err := s.write(ctx, engineID, func(t *transition.Tx) error {
		// Written first: a wait of the task that begins meanwhile sees
		// this signal, or this signal sees it (TouchTask).
		st, err := t.TouchTask(taskID)
		if err != nil {
			return err
		}
		if st.Terminal() {
			return store.Conflictf("task %d is %s and takes no signals", taskID, st)
		}
		// A signal no step of the task can ever wait for would be kept
		// for nothing (a mistyped name, while the real wait goes on): a
		// signal step of its name, or a durable function or a batch,
		// whose waits come as they run, must exist.
		var listens bool
		if err := t.QueryRow(`SELECT EXISTS (SELECT 1 FROM steps WHERE task_id = ? AND (signal = ? OR kind IN ('function', 'batch')))`,
			taskID, name).Scan(&listens); err != nil {
			return fmt.Errorf("find the steps of task %d that may wait for signal %q: %w", taskID, name, err)
		}
		if !listens {
			return store.Conflictf("task %d has no step that waits for signal %q", taskID, name)
		}
		var sigID int64
		if err := t.QueryRow(`INSERT INTO signals (task_id, name, payload, created_at) VALUES (?, ?, ?, ?) RETURNING id`,
			taskID, name, string(payload), t.Now).Scan(&sigID); err != nil {
			return fmt.Errorf("record signal %q of task %d: %w", name, taskID, err)
		}
		rows, err := t.Query(`SELECT id, name, children FROM steps WHERE task_id = ? AND state = 'waiting' AND signal = ? ORDER BY idx`, taskID, name)
		if err != nil {
			return fmt.Errorf("find steps waiting for signal %q: %w", name, err)
		}
		steps, err := sqldb.Collect(rows, sqltx.ScanStepRef)
		if err != nil {
			return fmt.Errorf("find steps waiting for signal %q: %w", name, err)
		}
		for _, w := range steps {
			ok, err := t.Deliver(sigID, w.ID, taskID, w.Name, w.Children, name, string(payload))
			if err != nil {
				return err
			}
			if ok {
				delivered = true
				return nil
			}
		}
		return nil
	})
	return delivered, err
}
