package server_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/client"
	"github.com/weftrun/weft/server"
	"github.com/weftrun/weft/wire"
)

// TestSupersedeAPI: on_conflict supersede through the API replaces the
// task holding the key and names it in the response; a bad value is a
// field error.
func TestSupersedeAPI(t *testing.T) {
	t.Parallel()
	en := newEnv(t, backends()["sqlite"](t), server.Options{})
	ctx := context.Background()
	c, err := client.New(en.url, en.admin)
	require.NoError(t, err)
	_, err = c.RegisterTemplate(ctx, "w.yaml", []byte("namespace: t\nname: w\nversion: \"1\"\nsteps:\n  - name: a\n    handler: go.add\n    depends_on: []\n"))
	require.NoError(t, err)
	// A delayed task stays unfinished until it is superseded.
	first, err := c.Submit(ctx, wire.SubmitRequest{Workflow: "t/w", IdempotencyKey: "k", RunAt: ptr(timeIn(3600))})
	require.NoError(t, err)
	dup, err := c.Submit(ctx, wire.SubmitRequest{Workflow: "t/w", IdempotencyKey: "k"})
	require.NoError(t, err)
	require.True(t, dup.Duplicate)
	second, err := c.Submit(ctx, wire.SubmitRequest{Workflow: "t/w", IdempotencyKey: "k", OnConflict: "supersede"})
	require.NoError(t, err)
	require.False(t, second.Duplicate)
	require.Equal(t, first.Task.ID, second.Superseded)
	old, err := c.Get(ctx, first.Task.ID)
	require.NoError(t, err)
	require.Equal(t, "cancelled", string(old.State))

	r := en.do("POST", "/v1/tasks", en.admin, map[string]any{"workflow": "t/w", "idempotency_key": "k", "on_conflict": "replace"})
	require.Equal(t, 400, r.status)
	_, field := r.errorCode(t)
	require.Equal(t, "on_conflict", field)
}

func ptr[T any](v T) *T { return &v }

// timeIn returns the time s seconds from now.
func timeIn(s int) time.Time { return time.Now().Add(time.Duration(s) * time.Second) }
