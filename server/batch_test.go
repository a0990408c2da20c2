package server_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/client"
	"github.com/weftrun/weft/server"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/wire"
)

// TestSubmitBatch: POST /v1/tasks/batch submits many tasks in one
// transaction, in order, a duplicate key answered with its task; a refused
// task fails the whole batch naming it by index, and submits none of them.
func TestSubmitBatch(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		ctx := context.Background()
		en := newEnv(t, open(t), server.Options{})
		en.register(chainTemplate)
		c, err := client.New(en.url, en.admin)
		require.NoError(t, err)

		first, err := c.Submit(ctx, wire.SubmitRequest{Workflow: "api/chain", IdempotencyKey: "k0"})
		require.NoError(t, err)
		res, err := c.SubmitMany(ctx, []wire.SubmitRequest{
			{Workflow: "api/chain", Input: []byte(`{"n": 1}`)},
			{Workflow: "api/chain", IdempotencyKey: "k0"},
			{Workflow: "api/chain@1", Priority: 5, Tags: map[string]string{"env": "test"}},
		})
		require.NoError(t, err)
		require.Len(t, res, 3)
		require.False(t, res[0].Duplicate)
		require.True(t, res[1].Duplicate)
		require.Equal(t, first.Task.ID, res[1].Task.ID)
		require.Equal(t, 5, res[2].Task.Priority)
		require.Equal(t, map[string]string{"env": "test"}, res[2].Task.Tags)
		done := en.waitTask(res[0].Task.ID)
		require.Equal(t, state.TaskCompleted, done.State)

		listed, err := c.List(ctx, store.TaskFilter{})
		require.NoError(t, err)
		before := len(listed)
		tests := []struct {
			name  string
			body  any
			field string
		}{
			{"an engine's check", map[string]any{"tasks": []any{
				map[string]any{"workflow": "api/chain"},
				map[string]any{"workflow": "api/chain", "priority": 2_000_000}}}, "tasks[1].priority"},
			{"a request's check", map[string]any{"tasks": []any{map[string]any{"workflow": "nope"}}}, "tasks[0].workflow"},
			{"empty", map[string]any{"tasks": []any{}}, "tasks"},
			{"too many", map[string]any{"tasks": make([]map[string]any, wire.MaxBatch+1)}, "tasks"},
		}
		for _, tt := range tests {
			r := en.do("POST", "/v1/tasks/batch", en.admin, tt.body)
			require.Equal(t, 400, r.status, "%s: %s", tt.name, r.body)
			_, field := r.errorCode(t)
			require.Equal(t, tt.field, field, tt.name)
		}
		r := en.do("POST", "/v1/tasks/batch", en.admin, map[string]any{"tasks": []any{
			map[string]any{"workflow": "api/chain"}, map[string]any{"workflow": "api/missing"}}})
		require.Equal(t, 404, r.status, "%s", r.body)
		_, err = c.SubmitMany(ctx, []wire.SubmitRequest{{Workflow: "api/chain"}, {Workflow: "api/chain", Priority: -2_000_000}})
		require.ErrorIs(t, err, store.ErrInvalid)

		listed, err = c.List(ctx, store.TaskFilter{})
		require.NoError(t, err)
		require.Len(t, listed, before, "a refused batch submits none of its tasks")
		require.Equal(t, 403, en.do("POST", "/v1/tasks/batch", en.key(server.PermTasksRead), map[string]any{"tasks": []any{map[string]any{"workflow": "api/chain"}}}).status)
	})
}
