package webhook

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
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
	// failures are the reasons of the failed deliveries recorded.
	failures []string
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

func (m *memHistory) WebhookFailed(_ context.Context, _ int64, why string, _ time.Time, _ bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.failures = append(m.failures, why)
	return nil
}

// failed returns the reasons of the failed deliveries, one a line.
func (m *memHistory) failed() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return strings.Join(m.failures, "\n")
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
	d := New(m, slog.New(slog.DiscardHandler), time.Millisecond, nil)
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
	failures := m.failed()
	require.NotContains(t, failures, "CloseIdleConnections", "a delivery broken by another's CloseIdleConnections")
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, got, total, "every event delivered; failed deliveries:\n%s", failures)
	// A delivery the receiver got but whose answer was lost (the
	// connection failed) is sent again, as at-least-once says, and its
	// failure is recorded with the event. Any other resend is a round
	// that began behind the cursor.
	failed := map[string]bool{}
	for _, m := range failedEvent.FindAllStringSubmatch(failures, -1) {
		failed[m[1]] = true
	}
	for id, n := range got {
		if n > 1 && failed[id] {
			t.Logf("event %s delivered %d times after its delivery failed", id, n)
			continue
		}
		require.Equal(t, 1, n, "event %s delivered %d times, and no delivery of it failed; failed deliveries:\n%s", id, n, failures)
	}
}

// failedEvent finds the event in the reason of a failed delivery.
var failedEvent = regexp.MustCompile(`\(event (\d+)\)`)
