package server_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/server"
	"github.com/weftrun/weft/wire"
)

// records keeps every log record.
type records struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *records) Enabled(context.Context, slog.Level) bool { return true }
func (h *records) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *records) WithGroup(string) slog.Handler            { return h }
func (h *records) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r.Clone())
	return nil
}

// find returns the records f accepts, with their attributes as text.
func (h *records) find(f func(r slog.Record, attrs map[string]string) bool) []slog.Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []slog.Record
	for _, r := range h.recs {
		attrs := map[string]string{}
		r.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value.String(); return true })
		if f(r, attrs) {
			out = append(out, r)
		}
	}
	return out
}

func (h *records) errors() []string {
	var out []string
	for _, r := range h.find(func(r slog.Record, _ map[string]string) bool { return r.Level >= slog.LevelError }) {
		out = append(out, r.Message)
	}
	return out
}

// TestClientGoneIsNoError: a client that goes away during a long-poll
// claim, an event stream or while a request is read is no error of the
// server's: nothing is logged at ERROR, and no answer is written.
func TestClientGoneIsNoError(t *testing.T) {
	t.Parallel()
	logs := &records{}
	en := newEnv(t, backends()["sqlite"](t), server.Options{Logger: slog.New(logs), MaxPoll: 10 * time.Second})
	var reg wire.WorkerRegistered
	en.ok(201, "POST", "/v1/workers", wire.RegisterWorker{Name: "py", Handlers: []string{"py.none"}}, &reg)
	// Without authentication, which reads the database, the request gets
	// to its handler before it notices.
	open := newEnv(t, backends()["sqlite"](t), server.Options{Logger: slog.New(logs), MaxPoll: 10 * time.Second, DisableAuth: true})
	var openReg wire.WorkerRegistered
	open.ok(201, "POST", "/v1/workers", wire.RegisterWorker{Name: "py", Handlers: []string{"py.none"}}, &openReg)

	// In the handler itself: the request's context ends while the claim
	// waits (or before it starts waiting: either way the client is gone).
	inProcess := []struct {
		name         string
		en           *env
		method, path string
		body         string
	}{
		{"long-poll claim", en, "POST", "/v1/workers/" + reg.WorkerID + "/claim", `{"handlers": ["py.none"], "wait_ms": 10000}`},
		{"event stream", en, "GET", "/v1/events", ""},
		{"task list", en, "GET", "/v1/tasks", ""},
		{"long-poll claim without auth", open, "POST", "/v1/workers/" + openReg.WorkerID + "/claim", `{"handlers": ["py.none"], "wait_ms": 10000}`},
		{"event stream without auth", open, "GET", "/v1/events", ""},
		{"task list without auth", open, "GET", "/v1/tasks", ""},
	}
	for _, tc := range inProcess {
		ctx, cancel := context.WithCancel(context.Background())
		req := httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body)).WithContext(ctx)
		req.Header.Set("Authorization", "Bearer "+en.admin)
		rec := httptest.NewRecorder()
		done := make(chan struct{})
		go func() {
			defer close(done)
			tc.en.srv.ServeHTTP(rec, req)
		}()
		cancel()
		<-done
		require.Empty(t, rec.Body.String(), "%s: no answer to a client that went away", tc.name)
		require.Empty(t, logs.errors(), "%s: nothing at ERROR", tc.name)
	}

	// Over the network: a stream the client closes after it began.
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, "GET", en.url+"/v1/events", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+en.admin)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.Equal(t, 200, res.StatusCode)
	cancel()
	res.Body.Close()
	deadline := time.Now().Add(10 * time.Second)
	for len(logs.find(func(r slog.Record, a map[string]string) bool {
		return r.Message == "request" && a["route"] == "GET /v1/events" && a["status"] == "200"
	})) == 0 {
		require.True(t, time.Now().Before(deadline), "the stream's request never ended")
		time.Sleep(10 * time.Millisecond)
	}
	require.Empty(t, logs.errors(), "a closed stream: nothing at ERROR")
}
