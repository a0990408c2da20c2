package sqlstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/workflow"
)

// History reads the audit log in commit order (see Dialect.TxHistory).
// Cursors are "<id>" in id order and "<txid>.<id>" in (txid, id) order.
func (s *Store) History(ctx context.Context, q store.HistoryQuery) ([]store.HistoryEvent, error) {
	switch {
	case q.Limit == 0:
		q.Limit = 100
	case q.Limit < 0 || q.Limit > 1000:
		return nil, fmt.Errorf("history: limit %d: want 1 to 1000: %w", q.Limit, store.ErrInvalid)
	}
	txid, id, err := s.parseCursor(q.After)
	if err != nil {
		return nil, err
	}
	var (
		where []string
		args  []any
	)
	if s.d.TxHistory {
		// Below the oldest running transaction the log no longer changes:
		// read only there, so that no row commits later before a cursor.
		where = append(where, `(a.txid, a.id) > (?::xid8, ?)`, `a.txid < pg_snapshot_xmin(pg_current_snapshot())`)
		args = append(args, strconv.FormatUint(txid, 10), id)
	} else {
		where = append(where, `a.id > ?`)
		args = append(args, id)
	}
	if q.Namespace != "" {
		where = append(where, `t.namespace = ?`)
		args = append(args, q.Namespace)
	}
	if q.Workflow != "" {
		ns, name, err := workflow.ParseName(q.Workflow)
		if err != nil {
			return nil, fmt.Errorf("history: %w", err)
		}
		where = append(where, `t.namespace = ? AND t.workflow = ?`)
		args = append(args, ns, name)
	}
	if q.TaskID != 0 {
		where = append(where, `a.task_id = ?`)
		args = append(args, q.TaskID)
	}
	order, pos := `a.id`, `'', a.id`
	if s.d.TxHistory {
		order, pos = `a.txid, a.id`, `a.txid::text, a.id`
	}
	rows, err := s.read(ctx, `SELECT `+pos+`, a.id, a.task_id, a.step, a.from_state, a.to_state, a.at, a.attempt, a.engine_id, a.reason,
		t.namespace, t.workflow
		FROM audit a JOIN tasks t ON t.id = a.task_id
		WHERE `+strings.Join(where, " AND ")+`
		ORDER BY `+order+` LIMIT ?`, append(args, q.Limit)...)
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	events, err := collect(rows, func(r Row) (store.HistoryEvent, error) {
		var (
			e        store.HistoryEvent
			tx       string
			posID    int64
			at       int64
			workflow string
		)
		if err := r.Scan(&tx, &posID, &e.ID, &e.TaskID, &e.Step, &e.From, &e.To, &at, &e.Attempt, &e.EngineID, &e.Reason,
			&e.Namespace, &workflow); err != nil {
			return e, fmt.Errorf("scan history: %w", err)
		}
		e.At = time.UnixMicro(at)
		e.Workflow = e.Namespace + "/" + workflow
		e.Type = store.EventType(e.Step, e.From, e.To)
		if store.Preempted(e.AuditEntry) {
			e.Type = "step.preempted"
		}
		e.Cursor = strconv.FormatInt(posID, 10)
		if tx != "" {
			e.Cursor = tx + "." + e.Cursor
		}
		return e, nil
	})
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	return events, nil
}

// HistoryEnd returns a cursor after every event committed so far. In
// (txid, id) order it is the oldest running transaction's: the events of
// transactions that committed after it began, but before now, follow it.
func (s *Store) HistoryEnd(ctx context.Context) (string, error) {
	q := `SELECT coalesce(max(id), 0) FROM audit`
	if s.d.TxHistory {
		q = `SELECT pg_snapshot_xmin(pg_current_snapshot())::text || '.0'`
	}
	var end string
	if err := s.readRow(ctx, q).Scan(&end); err != nil {
		return "", fmt.Errorf("history end: %w", err)
	}
	return end, nil
}

// parseCursor reads a history cursor of this store's order; "" is the
// start.
func (s *Store) parseCursor(c string) (txid uint64, id int64, err error) {
	if c == "" {
		return 0, 0, nil
	}
	bad := fmt.Errorf("history cursor %q: not one this database handed out: %w", c, store.ErrInvalid)
	idText := c
	if s.d.TxHistory {
		tx, rest, ok := strings.Cut(c, ".")
		if !ok {
			return 0, 0, bad
		}
		if txid, err = strconv.ParseUint(tx, 10, 64); err != nil {
			return 0, 0, bad
		}
		idText = rest
	}
	if id, err = strconv.ParseInt(idText, 10, 64); err != nil || id < 0 {
		return 0, 0, bad
	}
	return txid, id, nil
}
