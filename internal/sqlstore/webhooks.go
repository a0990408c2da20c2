package sqlstore

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/weftrun/weft/internal/sqlstore/sqldb"
	"github.com/weftrun/weft/internal/sqlstore/transition"
	"github.com/weftrun/weft/store"
)

const webhookColumns = `id, url, secret, namespace, workflow, types, cursor_pos, state, failures, last_error, next_attempt_at, delivered, created_at, created_by`

func scanWebhook(r sqldb.Row) (store.Webhook, error) {
	var (
		w             store.Webhook
		types         string
		next, created int64
	)
	if err := r.Scan(&w.ID, &w.URL, &w.Secret, &w.Namespace, &w.Workflow, &types, &w.Cursor, &w.State, &w.Failures, &w.LastError,
		&next, &w.Delivered, &created, &w.CreatedBy); err != nil {
		return w, fmt.Errorf("scan webhook: %w", err)
	}
	if types != "" {
		w.Types = strings.Split(types, ",")
	}
	w.NextAttemptAt, w.CreatedAt = time.UnixMicro(next), time.UnixMicro(created)
	return w, nil
}

// CreateWebhook stores a webhook.
func (s *admin) CreateWebhook(ctx context.Context, w store.Webhook) (store.Webhook, error) {
	err := s.write(ctx, "", func(t *transition.Tx) error {
		w.CreatedAt = time.UnixMicro(t.Now)
		if w.State == "" {
			w.State = store.WebhookActive
		}
		return t.QueryRow(`INSERT INTO webhooks (url, secret, namespace, workflow, types, cursor_pos, state, created_at, created_by)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id`,
			w.URL, w.Secret, w.Namespace, w.Workflow, strings.Join(w.Types, ","), w.Cursor, w.State, t.Now, w.CreatedBy).Scan(&w.ID)
	})
	if err != nil {
		return w, fmt.Errorf("create webhook: %w", err)
	}
	return w, nil
}

// Webhooks lists the webhooks.
func (s *admin) Webhooks(ctx context.Context) ([]store.Webhook, error) {
	rows, err := s.Read(ctx, `SELECT `+webhookColumns+` FROM webhooks ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("list webhooks: %w", err)
	}
	ws, err := sqldb.Collect(rows, scanWebhook)
	if err != nil {
		return nil, fmt.Errorf("list webhooks: %w", err)
	}
	return ws, nil
}

// webhookWrite runs one UPDATE or DELETE of a webhook; no row matched is
// ErrNotFound.
func (s *admin) webhookWrite(ctx context.Context, id int64, what, q string, args ...any) error {
	return s.write(ctx, "", func(t *transition.Tx) error {
		res, err := t.Exec(q, args...)
		if err != nil {
			return fmt.Errorf("%s webhook %d: %w", what, id, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("webhook %d: %w", id, store.ErrNotFound)
		}
		return nil
	})
}

// DeleteWebhook removes a webhook.
func (s *admin) DeleteWebhook(ctx context.Context, id int64) error {
	return s.webhookWrite(ctx, id, "delete", `DELETE FROM webhooks WHERE id = ?`, id)
}

// EnableWebhook makes a webhook active, due at once.
func (s *admin) EnableWebhook(ctx context.Context, id int64) error {
	return s.webhookWrite(ctx, id, "enable", `UPDATE webhooks SET state = ?, failures = 0, next_attempt_at = 0 WHERE id = ?`,
		store.WebhookActive, id)
}

// WebhookDelivered moves a webhook's cursor with a compare-and-swap.
func (s *admin) WebhookDelivered(ctx context.Context, id int64, from, to string, delivered int) error {
	return s.write(ctx, "", func(t *transition.Tx) error {
		res, err := t.Exec(`UPDATE webhooks SET cursor_pos = ?, delivered = delivered + ?, failures = 0, last_error = '', next_attempt_at = 0
			WHERE id = ? AND cursor_pos = ?`, to, delivered, id, from)
		if err != nil {
			return fmt.Errorf("webhook %d delivered: %w", id, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return store.Conflictf("webhook %d is gone or was moved past %q", id, from)
		}
		return nil
	})
}

// WebhookFailed records a failed delivery.
func (s *admin) WebhookFailed(ctx context.Context, id int64, reason string, next time.Time, disable bool) error {
	st := store.WebhookActive
	if disable {
		st = store.WebhookDisabled
	}
	return s.webhookWrite(ctx, id, "record failure of", `UPDATE webhooks SET failures = failures + 1, last_error = ?, next_attempt_at = ?, state = ?
		WHERE id = ?`, reason, next.UnixMicro(), st, id)
}
