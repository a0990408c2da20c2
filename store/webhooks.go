package store

import (
	"context"
	"time"
)

// Webhooks holds webhook subscriptions: each follows the history from its
// cursor and is delivered, in order, to its URL.
type Webhooks interface {
	// CreateWebhook stores w (its ID and CreatedAt are set) and returns it.
	CreateWebhook(ctx context.Context, w Webhook) (Webhook, error)
	// Webhooks lists every webhook, oldest first, with their secrets.
	Webhooks(ctx context.Context) ([]Webhook, error)
	// DeleteWebhook removes a webhook; an unknown id is ErrNotFound.
	DeleteWebhook(ctx context.Context, id int64) error
	// EnableWebhook makes a disabled webhook active again, to be delivered
	// at once from where it stopped; an active one is left as it is.
	EnableWebhook(ctx context.Context, id int64) error
	// WebhookDelivered moves a webhook's cursor from from to to after
	// delivered more events went out, and clears its failures. A cursor
	// that is no longer from (another leader moved it) is ErrConflict.
	WebhookDelivered(ctx context.Context, id int64, from, to string, delivered int) error
	// WebhookFailed records a failed delivery: the next attempt is due at
	// next; disable ends deliveries until EnableWebhook.
	WebhookFailed(ctx context.Context, id int64, reason string, next time.Time, disable bool) error
}

// Webhook states.
const (
	WebhookActive   = "active"
	WebhookDisabled = "disabled"
)

// Webhook is a subscription to the history's events.
type Webhook struct {
	ID  int64
	URL string
	// Secret signs deliveries; the API shows it only when the webhook is
	// created.
	Secret string
	// Namespace and Workflow ("namespace/name") filter the events; Types
	// lists the event types to send. Empty values match everything.
	Namespace string
	Workflow  string
	Types     []string
	// Cursor is the history position delivered up to.
	Cursor string
	// State is WebhookActive or WebhookDisabled.
	State string
	// Failures counts the failed attempts since the last delivery;
	// LastError says what went wrong last.
	Failures      int
	LastError     string
	NextAttemptAt time.Time
	// Delivered counts the events delivered.
	Delivered int64
	CreatedAt time.Time
	CreatedBy string
}
