package webhook

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/store"
)

// memHistory is a store of one webhook and a growing history, in memory:
// cursors are the events' numbers.
type memHistory struct {
	mu     sync.Mutex
	events int
	hook   store.Webhook
}

func (m *memHistory) add(n int) {
	m.mu.Lock()
	m.events += n
	m.mu.Unlock()
}

func (m *memHistory) History(_ context.Context, q store.HistoryQuery) ([]store.HistoryEvent, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	after := 0
	if q.After != "" {
		after, _ = strconv.Atoi(q.After)
	}
	var out []store.HistoryEvent
	for i := after + 1; i <= m.events && len(out) < q.Limit; i++ {
		out = append(out, store.HistoryEvent{Cursor: strconv.Itoa(i), Type: "task.submitted"})
	}
	return out, nil
}

func (m *memHistory) HistoryEnd(context.Context) (string, error) { return "", nil }

func (m *memHistory) CreateWebhook(context.Context, store.Webhook) (store.Webhook, error) {
	panic("not used")
}

func (m *memHistory) Webhooks(context.Context) ([]store.Webhook, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return []store.Webhook{m.hook}, nil
}

func (m *memHistory) DeleteWebhook(context.Context, int64) error { panic("not used") }
func (m *memHistory) EnableWebhook(context.Context, int64) error { panic("not used") }

func (m *memHistory) WebhookDelivered(_ context.Context, _ int64, from, to string, delivered int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.hook.Cursor != from {
		return store.Conflictf("moved past %q", from)
	}
	m.hook.Cursor = to
	m.hook.Delivered += int64(delivered)
	return nil
}

func (m *memHistory) WebhookFailed(context.Context, int64, string, time.Time, bool) error {
	return nil
}

// TestRoundsNeverResend: while events keep coming, each round of a
// webhook's deliveries goes on from where the last one ended, though the
// deliverer's poll fires while a round ends and the webhook list was read
// long before: no event reaches the receiver twice.
func TestRoundsNeverResend(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	got := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got[r.Header.Get("Weft-Event-Id")]++
		mu.Unlock()
	}))
	defer srv.Close()
	m := &memHistory{hook: store.Webhook{ID: 1, URL: srv.URL, Secret: "whsec_x", State: store.WebhookActive}}
	var logs syncBuffer
	d := New(m, slog.New(slog.NewTextHandler(&logs, nil)), time.Millisecond, nil)
	d.Lead(true)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { d.Run(ctx); close(done) }()
	// What else runs in the process may close http.DefaultTransport's
	// idle connections (every httptest.Server.Close does): the
	// deliverer's are its own.
	stopClosing := make(chan struct{})
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		for {
			select {
			case <-stopClosing:
				return
			case <-time.After(100 * time.Microsecond):
				http.DefaultTransport.(interface{ CloseIdleConnections() }).CloseIdleConnections()
			}
		}
	}()
	const total = 600
	for range total / 3 {
		m.add(3) // rounds of a few events, each ending while the poll fires
		time.Sleep(time.Millisecond)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n == total || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	close(stopClosing)
	<-closed
	require.NotContains(t, logs.String(), "CloseIdleConnections", "a delivery broken by another's CloseIdleConnections")
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, got, total, "every event delivered; the deliverer logged:\n%s", logs.String())
	// A delivery the receiver got but whose answer was lost (the
	// connection failed) is sent again, as at-least-once says, and its
	// failure is logged with the event. Any other resend is a round that
	// began behind the cursor.
	failed := map[string]bool{}
	for _, m := range failedEvent.FindAllStringSubmatch(logs.String(), -1) {
		failed[m[1]] = true
	}
	for id, n := range got {
		if n > 1 && failed[id] {
			t.Logf("event %s delivered %d times after its delivery failed", id, n)
			continue
		}
		require.Equal(t, 1, n, "event %s delivered %d times, and no delivery of it failed; the deliverer logged:\n%s", id, n, logs.String())
	}
}

// failedEvent finds the event of a failed delivery in the deliverer's log.
var failedEvent = regexp.MustCompile(`webhook delivery failed.*\(event (\d+)\)`)

// syncBuffer is a bytes.Buffer for several goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
