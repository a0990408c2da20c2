package sqlstore

import (
	"context"
	"fmt"
	"time"

	"github.com/weftrun/weft/internal/sqlstore/sqldb"
	"github.com/weftrun/weft/internal/sqlstore/transition"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// This file holds namespace retention and the operator log.

// SetRetention sets or clears one namespace retention and logs the change.
func (s *maintenance) SetRetention(ctx context.Context, r store.Retention) error {
	return s.write(ctx, r.UpdatedBy, func(t *transition.Tx) error {
		if _, err := t.Exec(`DELETE FROM retention WHERE namespace = ? AND state = ?`, r.Namespace, string(r.State)); err != nil {
			return fmt.Errorf("set retention: %w", err)
		}
		what := "cleared retention of " + string(r.State) + " tasks"
		if r.Keep > 0 {
			if _, err := t.Exec(`INSERT INTO retention (namespace, state, keep, updated_at, updated_by) VALUES (?, ?, ?, ?, ?)`,
				r.Namespace, string(r.State), r.Keep.Microseconds(), t.Now, r.UpdatedBy); err != nil {
				return fmt.Errorf("set retention: %w", err)
			}
			what = fmt.Sprintf("keep %s tasks %s", r.State, r.Keep)
		}
		return t.LogOperator(r.UpdatedBy, "retention", "namespace "+r.Namespace, what)
	})
}

// Retentions lists the namespace retentions.
func (s *maintenance) Retentions(ctx context.Context) ([]store.Retention, error) {
	rows, err := s.Read(ctx, `SELECT namespace, state, keep, updated_at, updated_by FROM retention ORDER BY namespace, state`)
	if err != nil {
		return nil, fmt.Errorf("retentions: %w", err)
	}
	out, err := sqldb.Collect(rows, func(r sqldb.Row) (store.Retention, error) {
		var v store.Retention
		var st string
		var keep, at int64
		err := r.Scan(&v.Namespace, &st, &keep, &at, &v.UpdatedBy)
		v.State, v.Keep, v.UpdatedAt = state.Task(st), time.Duration(keep)*time.Microsecond, time.UnixMicro(at)
		return v, err
	})
	if err != nil {
		return nil, fmt.Errorf("retentions: %w", err)
	}
	return out, nil
}

// OperatorLog returns the newest entries of the operator log.
func (s *maintenance) OperatorLog(ctx context.Context, limit int) ([]store.OperatorEntry, error) {
	if limit <= 0 {
		limit = 100
	}
	rows, err := s.Read(ctx, fmt.Sprintf(`SELECT id, at, actor, action, subject, reason FROM operator_log ORDER BY id DESC LIMIT %d`, limit))
	if err != nil {
		return nil, fmt.Errorf("operator log: %w", err)
	}
	out, err := sqldb.Collect(rows, func(r sqldb.Row) (store.OperatorEntry, error) {
		var e store.OperatorEntry
		var at int64
		err := r.Scan(&e.ID, &at, &e.Actor, &e.Action, &e.Subject, &e.Reason)
		e.At = time.UnixMicro(at)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("operator log: %w", err)
	}
	return out, nil
}
