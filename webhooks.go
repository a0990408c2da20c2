package weft

import (
	"context"

	"github.com/weftrun/weft/internal/webhook"
	"github.com/weftrun/weft/store"
)

// Webhook is a subscription that POSTs the history's events to a URL.
type Webhook = store.Webhook

// WebhookSpec describes a webhook to create.
type WebhookSpec struct {
	// URL receives one POST per event, with the event as JSON (the same
	// object as GET /v1/events sends), signed in the Weft-Signature
	// header: "t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">",
	// keyed with the webhook's secret.
	URL string
	// Namespace and Workflow ("namespace/name" or a name, as every
	// workflow filter: workflow.ParseFilter) filter the events; Types
	// selects event types (see EventTypes). Empty values match everything.
	Namespace string
	Workflow  string
	Types     []string
}

// EventTypes lists the event types of the history.
var EventTypes = webhook.EventTypes

// CreateWebhook creates a webhook delivering the matching events from now
// on, in history order, at least once each: the engine that holds the
// maintenance lease sends them one at a time, trying again with backoff
// while the receiver fails (no answer, 408, 429, 5xx) and disabling the
// webhook when it refuses an event for good (any other status). The
// returned webhook carries its secret, which is not shown again. op.Actor
// is recorded as its creator.
func (e *Engine) CreateWebhook(ctx context.Context, spec WebhookSpec, op Operator) (Webhook, error) {
	return e.core.Webhooks().Create(ctx, webhook.Spec{URL: spec.URL, Namespace: spec.Namespace, Workflow: spec.Workflow,
		Types: spec.Types, Actor: op.Actor})
}

// Webhooks lists the webhooks, without their secrets and with the
// passwords of their URLs hidden (https://user:xxxxx@host/path): only
// deliveries use them.
func (e *Engine) Webhooks(ctx context.Context) ([]Webhook, error) { return e.core.Webhooks().List(ctx) }

// DeleteWebhook removes a webhook.
func (e *Engine) DeleteWebhook(ctx context.Context, id int64, op Operator) error {
	return e.core.Webhooks().Delete(ctx, id, op.Actor)
}

// EnableWebhook makes a disabled webhook deliver again from the event it
// stopped at.
func (e *Engine) EnableWebhook(ctx context.Context, id int64, op Operator) error {
	return e.core.Webhooks().Enable(ctx, id, op.Actor)
}
