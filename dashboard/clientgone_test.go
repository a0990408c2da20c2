package dashboard_test

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/dashboard"
	"github.com/weftrun/weft/server"
)

// errorLog counts the records logged at ERROR.
type errorLog struct {
	mu   sync.Mutex
	msgs []string
}

func (h *errorLog) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelError }
func (h *errorLog) WithAttrs([]slog.Attr) slog.Handler           { return h }
func (h *errorLog) WithGroup(string) slog.Handler                { return h }
func (h *errorLog) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.msgs = append(h.msgs, r.Message)
	return nil
}

// TestAbandonedPageIsNoError: a browser that leaves a page while it loads
// is no error of the server's: nothing at ERROR on any page.
func TestAbandonedPageIsNoError(t *testing.T) {
	t.Parallel()
	logs := &errorLog{}
	en := newEnv(t, stores["sqlite"](t), server.Options{DisableAuth: true, Logger: slog.New(logs)})
	for _, pattern := range dashboard.PagePatterns() {
		path := pattern[len("GET "):]
		switch path {
		case "/{$}":
			path = "/"
		case "/tasks/{id}":
			path = "/tasks/1"
		case "/workflows/{namespace}/{name}":
			path = "/workflows/shop/checkout"
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		rec := httptest.NewRecorder()
		en.handler.ServeHTTP(rec, httptest.NewRequest("GET", path, nil).WithContext(ctx))
		logs.mu.Lock()
		require.Empty(t, logs.msgs, "%s: nothing at ERROR", path)
		logs.mu.Unlock()
	}
}
