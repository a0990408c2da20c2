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

// TestPolicies: pause, resume and limits through the REST API and the Go
// client, audited with the acting key, refused without the permission.
func TestPolicies(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		en := newEnv(t, open(t), server.Options{})
		en.register("namespace: shop\nname: add\nversion: \"1\"\nsteps:\n  - name: s\n    handler: go.add\n")
		c, err := client.New(en.url, en.key(server.PermPoliciesRead, server.PermPoliciesWrite))
		require.NoError(t, err)
		ctx := t.Context()

		p, err := c.Pause(ctx, "shop/add", "incident 12")
		require.NoError(t, err)
		require.True(t, p.Paused)
		var task wire.Task
		en.ok(201, "POST", "/v1/tasks", map[string]any{"workflow": "shop/add", "input": map[string]int{"n": 1}}, &task)

		p, err = c.SetConcurrency(ctx, "shop", 3, "")
		require.NoError(t, err)
		require.Equal(t, 3, p.Concurrency)
		rep, err := c.Policies(ctx)
		require.NoError(t, err)
		require.Len(t, rep.Policies, 2)
		require.Equal(t, "shop", rep.Policies[0].Target)
		require.Equal(t, "shop/add", rep.Policies[1].Target)
		require.True(t, rep.Policies[1].Paused)

		_, err = c.Resume(ctx, "shop/add", "")
		require.NoError(t, err)
		require.Equal(t, state.TaskCompleted, en.waitTask(task.ID).State, "resumed work runs")

		changes, err := c.PolicyChanges(ctx, 2)
		require.NoError(t, err)
		require.Len(t, changes, 2)
		require.Equal(t, "resume", changes[0].Change)
		require.Equal(t, "concurrency=3", changes[1].Change)
		require.Regexp(t, `^api:`, changes[0].Actor)

		// Bad changes are 400 with the field; reading is not writing.
		for _, tt := range []struct {
			body  any
			field string
		}{
			{map[string]any{"paused": true}, "target"},
			{map[string]any{"target": "shop"}, "paused"},
			{map[string]any{"target": "shop", "concurrency": -2}, "concurrency"},
			{map[string]any{"target": "shop", "paused": true, "colour": "red"}, ""},
		} {
			r := en.do("POST", "/v1/policies", en.admin, tt.body)
			require.Equal(t, 400, r.status, "%s", r.body)
			if tt.field != "" {
				require.Contains(t, string(r.body), `"field":"`+tt.field+`"`)
			}
		}
		_, err = c.ChangePolicy(ctx, wire.PolicyChange{Target: "shop/add", Concurrency: new(int)})
		require.ErrorIs(t, err, store.ErrInvalid, "a workflow's limit is in its template")
		reader, err := client.New(en.url, en.key(server.PermPoliciesRead))
		require.NoError(t, err)
		_, err = reader.Pause(ctx, "shop", "")
		var ce *client.Error
		require.True(t, errors.As(err, &ce), "%v", err)
		require.Equal(t, 403, ce.Status)
		_, err = reader.Policies(ctx)
		require.NoError(t, err)
		r := en.do("GET", "/v1/policies/changes?limit=0", en.admin, nil)
		require.Equal(t, 400, r.status)
	})
}

// TestPolicyWeights: a namespace's weight through the REST API and the Go
// client, listed, audited, validated with the field.
func TestPolicyWeights(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		en := newEnv(t, open(t), server.Options{})
		en.register("namespace: shop\nname: add\nversion: \"1\"\nsteps:\n  - name: s\n    handler: go.add\n")
		en.register("namespace: other\nname: add\nversion: \"1\"\nsteps:\n  - name: s\n    handler: go.add\n")
		c, err := client.New(en.url, en.key(server.PermPoliciesRead, server.PermPoliciesWrite))
		require.NoError(t, err)
		ctx := t.Context()

		p, err := c.SetWeight(ctx, "shop", 3, "black friday")
		require.NoError(t, err)
		require.Equal(t, 3, p.Weight)
		two := 2
		p, err = c.ChangePolicy(ctx, wire.PolicyChange{Target: "other", Concurrency: &two, Weight: &two})
		require.NoError(t, err)
		require.Equal(t, 2, p.Weight)
		require.Equal(t, 2, p.Concurrency)
		rep, err := c.Policies(ctx)
		require.NoError(t, err)
		require.Len(t, rep.Policies, 2)
		require.Equal(t, 2, rep.Policies[0].Weight)
		require.Equal(t, 3, rep.Policies[1].Weight)
		changes, err := c.PolicyChanges(ctx, 2)
		require.NoError(t, err)
		require.Equal(t, "concurrency=2 weight=2", changes[0].Change, "one change, one audit record")
		require.Equal(t, "weight=3", changes[1].Change)
		require.Equal(t, "black friday", changes[1].Reason)

		_, err = c.SetWeight(ctx, "shop", 1, "")
		require.NoError(t, err)
		rep, err = c.Policies(ctx)
		require.NoError(t, err)
		require.Len(t, rep.Policies, 1, "weight 1 is the default: shop has nothing set")

		for _, tt := range []struct {
			body  any
			field string
		}{
			{map[string]any{"target": "shop", "weight": -1}, "weight"},
			{map[string]any{"target": "shop", "weight": 1001}, "weight"},
		} {
			r := en.do("POST", "/v1/policies", en.admin, tt.body)
			require.Equal(t, 400, r.status, "%s", r.body)
			require.Contains(t, string(r.body), `"field":"`+tt.field+`"`)
		}
		_, err = c.SetWeight(ctx, "shop/add", 2, "")
		require.ErrorIs(t, err, store.ErrInvalid, "a weight is a namespace's")
	})
}
