package server_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/client"
	"github.com/weftrun/weft/server"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/wire"
)

// TestRatePolicies: a namespace's rate through the REST API and the Go
// client, shown with its tokens, audited, removed with "off"; bad rates
// are 400 with the field.
func TestRatePolicies(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		en := newEnv(t, open(t), server.Options{})
		en.register("namespace: shop\nname: add\nversion: \"1\"\nsteps:\n  - name: s\n    handler: go.add\n")
		c, err := client.New(en.url, en.key(server.PermPoliciesRead, server.PermPoliciesWrite))
		require.NoError(t, err)
		ctx := t.Context()

		p, err := c.SetRate(ctx, "shop", "50/s", "protect the provider")
		require.NoError(t, err)
		require.Equal(t, &store.Rate{Limit: 50, Per: time.Second}, p.Rate)
		require.NotNil(t, p.Tokens)
		require.InDelta(t, 50.0, *p.Tokens, 1e-9)
		concurrency := 4
		rate := "100/m"
		p, err = c.ChangePolicy(ctx, wire.PolicyChange{Target: "shop", Concurrency: &concurrency, Rate: &rate})
		require.NoError(t, err)
		require.Equal(t, 4, p.Concurrency)
		require.Equal(t, "100/m", p.Rate.String())
		rep, err := c.Policies(ctx)
		require.NoError(t, err)
		require.Len(t, rep.Policies, 1)
		require.Equal(t, "100/m", rep.Policies[0].Rate.String())
		require.NotNil(t, rep.Rates)

		changes, err := c.PolicyChanges(ctx, 2)
		require.NoError(t, err)
		require.Equal(t, "concurrency=4 rate=100/m", changes[0].Change)
		require.Equal(t, "rate=50/s", changes[1].Change)
		require.Equal(t, "protect the provider", changes[1].Reason)
		require.Regexp(t, `^api:`, changes[1].Actor)

		p, err = c.SetRate(ctx, "shop", "off", "")
		require.NoError(t, err)
		require.Nil(t, p.Rate)
		require.Nil(t, p.Tokens)

		for _, body := range []map[string]any{
			{"target": "shop", "rate": "fast"},
			{"target": "shop", "rate": "0/s"},
			{"target": "shop", "rate": "5/48h"},
			{"target": "shop", "rate": 5},
		} {
			r := en.do("POST", "/v1/policies", en.admin, body)
			require.Equal(t, 400, r.status, "%s", r.body)
			if _, isString := body["rate"].(string); isString {
				require.Contains(t, string(r.body), `"field":"rate"`)
			}
		}
		_, err = c.SetRate(ctx, "shop/add", "5/s", "")
		require.ErrorIs(t, err, store.ErrInvalid, "a workflow's rates are in its template")
	})
}
