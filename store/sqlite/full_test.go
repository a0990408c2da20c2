package sqlite_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/server"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store/sqlite"
	"github.com/weftrun/weft/workflow"
)

// logRecords keeps the records logged at Warn and above.
type logRecords struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *logRecords) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (h *logRecords) WithAttrs([]slog.Attr) slog.Handler           { return h }
func (h *logRecords) WithGroup(string) slog.Handler                { return h }
func (h *logRecords) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r.Clone())
	return nil
}

// count returns how many records at level or above have a message
// starting with prefix.
func (h *logRecords) count(level slog.Level, prefix string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, r := range h.recs {
		if r.Level >= level && strings.HasPrefix(r.Message, prefix) {
			n++
		}
	}
	return n
}

// TestFullDiskIsUnavailable: with the database file unable to grow
// (PRAGMA max_page_count, which fails writes with SQLITE_FULL as a full
// disk does), REST answers 503 with Retry-After, not 500; the server logs
// the outage a few times, not once per request; and the outcome of a step
// that finished meanwhile is kept and written once space returns, when the
// same requests succeed again and every task completes.
func TestFullDiskIsUnavailable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "weft.db"), sqlite.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })

	logs := &logRecords{}
	log := slog.New(logs)
	e, err := weft.New(s, weft.Config{Logger: log, PollInterval: 20 * time.Millisecond, HeartbeatInterval: 200 * time.Millisecond,
		LeaseTTL: 10 * time.Second, ShutdownTimeout: 5 * time.Second})
	require.NoError(t, err)
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	e.Handle("disk.wait", func(ctx context.Context, a *weft.Attempt) (any, error) {
		select {
		case started <- struct{}{}:
		default:
		}
		select {
		case <-release:
			return map[string]bool{"done": true}, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	e.Handle("disk.ok", func(ctx context.Context, a *weft.Attempt) (any, error) { return map[string]bool{"ok": true}, nil })
	require.NoError(t, e.Register(ctx, workflow.New("disk", "wait", "1").Step("w", "disk.wait")))
	require.NoError(t, e.Register(ctx, workflow.New("disk", "ok", "1").Step("o", "disk.ok")))
	require.NoError(t, e.Start(ctx))
	t.Cleanup(func() { _ = e.Stop(context.Background()) })
	srv, err := server.New(e, server.Options{Logger: log, DisableAuth: true, RetryAfter: 2 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)

	submit := func(wf string) (int, http.Header, int64) {
		body, err := json.Marshal(map[string]any{"workflow": wf, "input": map[string]string{"pad": strings.Repeat("x", 64<<10)}})
		require.NoError(t, err)
		res, err := http.Post(hs.URL+"/v1/tasks", "application/json", bytes.NewReader(body))
		require.NoError(t, err)
		defer res.Body.Close()
		var out struct{ ID int64 }
		_ = json.NewDecoder(res.Body).Decode(&out)
		return res.StatusCode, res.Header, out.ID
	}

	// A task whose step runs while the disk is full.
	status, _, waiting := submit("disk/wait")
	require.Equal(t, http.StatusCreated, status)
	<-started

	require.NoError(t, s.SetMaxPageCount(ctx, 0))
	const requests = 40
	for i := 0; i < requests; i++ {
		status, h, _ := submit("disk/ok")
		require.Equal(t, http.StatusServiceUnavailable, status, "request %d on a full disk", i)
		require.Equal(t, "2", h.Get("Retry-After"))
	}
	// The step finishes while nothing can be written: its outcome waits.
	close(release)
	require.LessOrEqual(t, logs.count(slog.LevelWarn, "database unavailable"), 2, "the outage is logged a few times, not per request")
	require.Zero(t, logs.count(slog.LevelError, "request failed"), "no request logs an error")

	require.NoError(t, s.SetMaxPageCount(ctx, 1<<30))
	var ids []int64
	for i := 0; i < 3; i++ {
		status, _, id := submit("disk/ok")
		require.Equal(t, http.StatusCreated, status, "once space returns")
		ids = append(ids, id)
	}
	for _, id := range append(ids, waiting) {
		deadline := time.Now().Add(30 * time.Second)
		for {
			task, err := e.Get(ctx, id)
			require.NoError(t, err)
			if task.State.Terminal() {
				require.Equal(t, state.TaskCompleted, task.State, "task %d", id)
				break
			}
			require.True(t, time.Now().Before(deadline), "task %d still %s", id, task.State)
			time.Sleep(20 * time.Millisecond)
		}
	}
}
