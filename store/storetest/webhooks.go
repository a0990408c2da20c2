package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/store"
)

var webhookTests = []struct {
	name string
	fn   func(*testing.T, *harness)
}{
	{"Webhooks", testWebhooks},
}

func testWebhooks(t *testing.T, h *harness) {
	a, err := h.s.CreateWebhook(h.ctx, store.Webhook{URL: "https://hooks.example/a", Secret: "s1", Namespace: "shop",
		Types: []string{"task.failed", "step.failed"}, Cursor: "c0", CreatedBy: "cli:alice"})
	require.NoError(t, err)
	require.NotZero(t, a.ID)
	b, err := h.s.CreateWebhook(h.ctx, store.Webhook{URL: "https://hooks.example/b", Secret: "s2"})
	require.NoError(t, err)

	list, err := h.s.Webhooks(h.ctx)
	require.NoError(t, err)
	require.Len(t, list, 2)
	got := list[0]
	require.Equal(t, a.ID, got.ID)
	require.Equal(t, []string{"task.failed", "step.failed"}, got.Types)
	require.Equal(t, "shop", got.Namespace)
	require.Equal(t, "c0", got.Cursor)
	require.Equal(t, "s1", got.Secret)
	require.Equal(t, store.WebhookActive, got.State)
	require.Equal(t, "cli:alice", got.CreatedBy)
	require.Nil(t, list[1].Types)

	// Deliveries move the cursor with a compare-and-swap.
	require.NoError(t, h.s.WebhookDelivered(h.ctx, a.ID, "c0", "c5", 5))
	require.ErrorIs(t, h.s.WebhookDelivered(h.ctx, a.ID, "c0", "c9", 9), store.ErrConflict, "another leader moved it")

	next := h.clock.Now().Add(time.Minute)
	require.NoError(t, h.s.WebhookFailed(h.ctx, a.ID, "POST: 503", next, false))
	require.NoError(t, h.s.WebhookFailed(h.ctx, a.ID, "POST: 404", next, true))
	list, err = h.s.Webhooks(h.ctx)
	require.NoError(t, err)
	got = list[0]
	require.Equal(t, "c5", got.Cursor)
	require.EqualValues(t, 5, got.Delivered)
	require.Equal(t, 2, got.Failures)
	require.Equal(t, "POST: 404", got.LastError)
	require.Equal(t, store.WebhookDisabled, got.State)
	require.True(t, got.NextAttemptAt.Equal(next))

	require.NoError(t, h.s.EnableWebhook(h.ctx, a.ID))
	require.NoError(t, h.s.WebhookDelivered(h.ctx, a.ID, "c5", "c6", 1))
	list, err = h.s.Webhooks(h.ctx)
	require.NoError(t, err)
	require.Equal(t, store.WebhookActive, list[0].State)
	require.Zero(t, list[0].Failures)
	require.Empty(t, list[0].LastError)

	require.NoError(t, h.s.DeleteWebhook(h.ctx, b.ID))
	require.ErrorIs(t, h.s.DeleteWebhook(h.ctx, b.ID), store.ErrNotFound)
	require.ErrorIs(t, h.s.EnableWebhook(h.ctx, b.ID), store.ErrNotFound)
	require.ErrorIs(t, h.s.WebhookFailed(h.ctx, b.ID, "x", next, false), store.ErrNotFound)
	list, err = h.s.Webhooks(h.ctx)
	require.NoError(t, err)
	require.Len(t, list, 1)
}
