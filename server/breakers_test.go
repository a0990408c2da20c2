package server_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/client"
	"github.com/weftrun/weft/server"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/wire"
)

// TestBreakers: a breaker opened by failures is listed by GET /v1/policies
// and reset through the REST API and the Go client, audited with the
// acting key, refused without the permission.
func TestBreakers(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		en := newEnv(t, open(t), server.Options{})
		en.register("namespace: shop\nname: pay\nversion: \"1\"\nsteps:\n  - name: s\n    handler: go.fail\n" +
			"    retry: { max_attempts: 1 }\n    circuit_breaker: { failures: 1, cooldown: 1h }\n")
		c, err := client.New(en.url, en.key(server.PermPoliciesRead, server.PermPoliciesWrite))
		require.NoError(t, err)
		ctx := t.Context()

		var task wire.Task
		en.ok(201, "POST", "/v1/tasks", map[string]any{"workflow": "shop/pay", "input": map[string]int{"n": 1}}, &task)
		require.Equal(t, state.TaskFailed, en.waitTask(task.ID).State)
		rep, err := c.Policies(ctx)
		require.NoError(t, err)
		require.Len(t, rep.Breakers, 1)
		require.Equal(t, "shop/pay/s", rep.Breakers[0].Key)
		require.Equal(t, store.BreakerOpen, rep.Breakers[0].State)
		require.NotNil(t, rep.Breakers[0].RetryAt)
		scrape := en.do("GET", "/metrics", "", nil)
		require.Equal(t, 200, scrape.status)
		body := string(scrape.body)
		require.Equal(t, 1.0, metricValue(t, body, "weft_breakers_open"))
		require.Equal(t, 1.0, metricValue(t, body, "weft_breaker_state", `breaker="shop/pay/s"`, `state="open"`))
		require.Equal(t, 0.0, metricValue(t, body, "weft_breaker_state", `breaker="shop/pay/s"`, `state="closed"`))
		require.Equal(t, 1.0, metricValue(t, body, "weft_breaker_failures", `breaker="shop/pay/s"`))

		reader, err := client.New(en.url, en.key(server.PermPoliciesRead))
		require.NoError(t, err)
		_, err = reader.ResetBreaker(ctx, "shop/pay/s", "")
		var ce *client.Error
		require.True(t, errors.As(err, &ce), "%v", err)
		require.Equal(t, 403, ce.Status)

		b, err := c.ResetBreaker(ctx, "shop/pay/s", "provider back")
		require.NoError(t, err)
		require.Equal(t, store.BreakerClosed, b.State)
		changes, err := c.PolicyChanges(ctx, 1)
		require.NoError(t, err)
		require.Equal(t, "breaker reset (was open)", changes[0].Change)
		require.Equal(t, "provider back", changes[0].Reason)
		require.Regexp(t, `^api:`, changes[0].Actor)

		_, err = c.ResetBreaker(ctx, "shop/pay/s", "")
		require.ErrorIs(t, err, store.ErrNotFound, "forgotten once reset")
		_, err = c.ResetBreaker(ctx, "shop/pay", "")
		require.ErrorIs(t, err, store.ErrInvalid)
		r := en.do("POST", "/v1/breakers/reset", en.admin, map[string]any{"reason": "x"})
		require.Equal(t, 400, r.status, "%s", r.body)
		require.Contains(t, string(r.body), `"field":"key"`)
	})
}
