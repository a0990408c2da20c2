package server_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/client"
	"github.com/weftrun/weft/server"
	"github.com/weftrun/weft/store"
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

// TestConcurrentSupersedeAPI: parallel submissions that supersede the same
// key, on every store, are each answered 201 (or 503 with Retry-After when
// the database stayed contended, which clients retry), never 500; in the
// end one task holds the key.
func TestConcurrentSupersedeAPI(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		en := newEnv(t, open(t), server.Options{})
		en.register("namespace: t\nname: w\nversion: \"1\"\nsteps:\n  - name: a\n    handler: go.add\n  - name: b\n    handler: go.add\n    depends_on: [a]\n")
		const writers, each = 10, 5
		statuses := make(chan response, writers*each)
		var wg sync.WaitGroup
		for range writers {
			wg.Go(func() {
				for range each {
					statuses <- en.do("POST", "/v1/tasks", en.admin, map[string]any{"workflow": "t/w", "idempotency_key": "k", "on_conflict": "supersede"})
				}
			})
		}
		wg.Wait()
		close(statuses)
		created := 0
		for r := range statuses {
			switch r.status {
			case 201:
				created++
			case 503:
				require.NotEmpty(t, r.header.Get("Retry-After"), "%s", r.body)
			default:
				t.Fatalf("answered %d: %s", r.status, r.body)
			}
		}
		require.Positive(t, created)
		var page taskPage
		en.ok(200, "GET", "/v1/tasks?limit=100", nil, &page)
		require.Len(t, page.Tasks, created)
		holders := 0
		for _, task := range page.Tasks {
			if task.IdempotencyKey == "k" {
				holders++
			}
		}
		require.Equal(t, 1, holders)
	})
}

// contendedStore gives up every bulk action on contention.
type contendedStore struct{ store.Store }

func (contendedStore) CancelTasks(context.Context, []int64, string, string) (store.BatchResult, error) {
	return store.BatchResult{}, fmt.Errorf("cancel tasks: %w: deadlock detected (SQLSTATE 40P01)", store.ErrContended)
}

// TestContendedIs503: a write the store gave up on contention is answered
// 503 unavailable with Retry-After, not 500.
func TestContendedIs503(t *testing.T) {
	t.Parallel()
	en := newEnv(t, contendedStore{backends()["sqlite"](t)}, server.Options{RetryAfter: 3 * time.Second})
	en.register("namespace: t\nname: w\nversion: \"1\"\nsteps:\n  - name: a\n    handler: nobody.serves.this\n")
	en.ok(201, "POST", "/v1/tasks", map[string]any{"workflow": "t/w"}, nil)
	r := en.do("POST", "/v1/tasks/cancel", en.admin, map[string]any{"filter": map[string]any{"namespace": "t"}})
	require.Equal(t, 503, r.status, "%s", r.body)
	require.Equal(t, "3", r.header.Get("Retry-After"))
	code, _ := r.errorCode(t)
	require.Equal(t, server.CodeUnavailable, code)
}
