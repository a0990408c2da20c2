package server_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/server"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/wire"
)

// TestBulkReportsProgress: a bulk action that stops before the end of its
// selection (here after 2 batches of 3; in production once half the
// request's time has passed) answers 200 with what it did, "complete":
// false, what remains and a cursor, all true to the database; going on
// from the cursor finishes it. By ids, what remains are the ids after the
// first "matched".
func TestBulkReportsProgress(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		en := newEnv(t, open(t), server.Options{BulkBatchSize: 3, BulkMaxBatches: 2})
		en.register("namespace: demo\nname: parked\nversion: \"1\"\nsteps:\n  - name: s\n    handler: nobody.serves.this\n")
		const n = 10
		ids := make([]int64, n)
		for i := range ids {
			var task wire.Task
			en.ok(201, "POST", "/v1/tasks", map[string]any{"workflow": "demo/parked"}, &task)
			ids[i] = task.ID
		}
		pending := func() int {
			var page taskPage
			en.ok(200, "GET", "/v1/tasks?state=pending&limit=100", nil, &page)
			return len(page.Tasks)
		}
		filter := map[string]any{"namespace": "demo", "state": "pending"}
		var res wire.BulkResult
		en.ok(200, "POST", "/v1/tasks/cancel", map[string]any{"filter": filter}, &res)
		require.Equal(t, wire.BulkResult{Matched: 6, Done: 6, Remaining: 4, Next: ids[4]}, res, "newest first: the 6 newest")
		require.Equal(t, 4, pending())
		next := res.Next
		res = wire.BulkResult{}
		en.ok(200, "POST", "/v1/tasks/cancel", map[string]any{"filter": filter, "cursor": next}, &res)
		require.Equal(t, wire.BulkResult{Matched: 4, Done: 4, Complete: true}, res)
		require.Zero(t, pending())

		// By ids: 7 ids, 6 handled, the last one left.
		res = wire.BulkResult{}
		en.ok(200, "POST", "/v1/tasks/delete", map[string]any{"ids": ids[:7]}, &res)
		require.Equal(t, wire.BulkResult{Matched: 6, Done: 6, Remaining: 1}, res)
		res = wire.BulkResult{}
		en.ok(200, "POST", "/v1/tasks/delete", map[string]any{"ids": ids[6:7]}, &res)
		require.Equal(t, wire.BulkResult{Matched: 1, Done: 1, Complete: true}, res)

		// A task listed twice is counted and acted on once.
		res = wire.BulkResult{}
		en.ok(200, "POST", "/v1/tasks/delete", map[string]any{"ids": []int64{ids[7], ids[8], ids[7]}, "dry_run": true}, &res)
		require.Equal(t, 2, res.Matched, "%+v", res)
		res = wire.BulkResult{}
		en.ok(200, "POST", "/v1/tasks/delete", map[string]any{"ids": []int64{ids[7], ids[7]}}, &res)
		require.Equal(t, wire.BulkResult{Matched: 1, Done: 1, Complete: true}, res)

		r := en.do("POST", "/v1/tasks/cancel", en.admin, map[string]any{"ids": ids[8:], "cursor": 3})
		require.Equal(t, 400, r.status, "%s", r.body)
		_, field := r.errorCode(t)
		require.Equal(t, "cursor", field)
	})
}

// TestBulkStopsAtUntil: through the Go API, an action whose Until has
// passed does one batch and says what it did and what remains.
func TestBulkStopsAtUntil(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		en := newEnv(t, open(t), server.Options{})
		en.register("namespace: demo\nname: parked\nversion: \"1\"\nsteps:\n  - name: s\n    handler: nobody.serves.this\n")
		for range 5 {
			en.ok(201, "POST", "/v1/tasks", map[string]any{"workflow": "demo/parked"}, nil)
		}
		req := weft.BulkRequest{Filter: weft.TaskFilter{Namespace: "demo"}, BatchSize: 2, Until: time.Now().Add(-time.Second)}
		total := 0
		for range 5 {
			res, err := en.e.CancelTasks(t.Context(), req)
			require.NoError(t, err)
			total += res.Done
			n, err := en.st.CountTasks(t.Context(), store.TaskFilter{Namespace: "demo", State: state.TaskPending})
			require.NoError(t, err)
			require.Equal(t, 5-total, n)
			if res.Complete {
				break
			}
			require.Equal(t, 2, res.Done, "one batch")
			require.Equal(t, n, res.Remaining)
			req.Cursor = res.Next
		}
		require.Equal(t, 5, total)
	})
}
