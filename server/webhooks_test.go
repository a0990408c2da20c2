package server_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/client"
	"github.com/weftrun/weft/server"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/wire"
)

// receiver is a webhook endpoint that checks signatures and answers with
// the status its fail function picks.
type receiver struct {
	t      *testing.T
	secret atomic.Value // string
	fail   atomic.Value // func(n int) int: status for the n-th request
	mu     sync.Mutex
	n      int
	events []wire.Event
	srv    *httptest.Server
}

func newReceiver(t *testing.T) *receiver {
	rc := &receiver{t: t}
	rc.secret.Store("")
	rc.fail.Store(func(int) int { return 200 })
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := client.VerifyWebhook(r, rc.secret.Load().(string), time.Minute)
		if err != nil {
			t.Errorf("delivery refused: %v", err)
			w.WriteHeader(400)
			return
		}
		rc.mu.Lock()
		rc.n++
		status := rc.fail.Load().(func(int) int)(rc.n)
		if status == 200 {
			var ev wire.Event
			if err := json.Unmarshal(body, &ev); err != nil {
				t.Errorf("body: %v", err)
			}
			if r.Header.Get("Weft-Event-Id") != ev.Cursor || r.Header.Get("Weft-Event-Type") != ev.Type {
				t.Errorf("headers %v do not match the event %+v", r.Header, ev)
			}
			rc.events = append(rc.events, ev)
		}
		rc.mu.Unlock()
		w.WriteHeader(status)
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) received() []wire.Event {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]wire.Event(nil), rc.events...)
}

// waitFor polls cond until it holds or fails after a deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestWebhookDelivery: a webhook receives every matching event once, in
// history order, signed, through passing failures of its receiver; a
// receiver that refuses an event for good disables it until it is enabled
// again, and nothing is lost.
func TestWebhookDelivery(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		en := newEnv(t, open(t), server.Options{})
		en.register(addTemplate)
		rc := newReceiver(t)
		rc.fail.Store(func(n int) int {
			if n <= 2 {
				return 503 // passing: retried
			}
			return 200
		})
		writer := en.key(server.PermWebhooksWrite)
		reader := en.key(server.PermWebhooksRead)
		c, err := client.New(en.url, writer)
		require.NoError(t, err)
		w, err := c.CreateWebhook(t.Context(), wire.CreateWebhook{URL: rc.srv.URL + "/hook", Namespace: "ev",
			Types: []string{"task.submitted", "step.completed", "task.completed"}})
		require.NoError(t, err)
		require.Regexp(t, `^whsec_[0-9a-f]{64}$`, w.Secret)
		rc.secret.Store(w.Secret)

		for i := 0; i < 3; i++ {
			en.ok(201, "POST", "/v1/tasks", map[string]any{"workflow": "ev/add"}, nil)
		}
		// 3 tasks × (submitted + 2 steps completed + completed)
		waitFor(t, "12 deliveries", func() bool { return len(rc.received()) >= 12 })
		got := rc.received()
		require.Len(t, got, 12)
		seen := map[int64]bool{}
		for _, ev := range got {
			require.False(t, seen[ev.ID], "event %d delivered once", ev.ID)
			seen[ev.ID] = true
			require.Contains(t, []string{"task.submitted", "step.completed", "task.completed"}, ev.Type)
		}

		history, err := en.e.History(t.Context(), weft.HistoryQuery{Namespace: "ev", Limit: 1000})
		require.NoError(t, err)
		var order []int64
		for _, ev := range history {
			if ev.Type == "task.submitted" || ev.Type == "step.completed" || ev.Type == "task.completed" {
				order = append(order, ev.ID)
			}
		}
		var delivered []int64
		for _, ev := range got {
			delivered = append(delivered, ev.ID)
		}
		require.Equal(t, order, delivered, "in history order")

		// The list shows no secret; a read key may list, not create.
		rd, err := client.New(en.url, reader)
		require.NoError(t, err)
		// The receiver answered the last POST before the deliverer wrote
		// that it was delivered: wait for the count.
		var list []client.Webhook
		waitFor(t, "12 deliveries recorded", func() bool {
			list, err = rd.Webhooks(t.Context())
			require.NoError(t, err)
			return len(list) == 1 && list[0].Delivered == 12
		})
		require.Empty(t, list[0].Secret)
		_, err = rd.CreateWebhook(t.Context(), wire.CreateWebhook{URL: rc.srv.URL})
		require.True(t, client.IsCode(err, "forbidden"), "%v", err)

		// A refusal for good disables the webhook; enabling resumes it.
		rc.fail.Store(func(int) int { return 404 })
		var more wire.Task
		en.ok(201, "POST", "/v1/tasks", map[string]any{"workflow": "ev/add"}, &more)
		waitFor(t, "the webhook disabled", func() bool {
			list, err := rd.Webhooks(t.Context())
			require.NoError(t, err)
			return list[0].State == store.WebhookDisabled
		})
		list, err = rd.Webhooks(t.Context())
		require.NoError(t, err)
		require.Contains(t, list[0].LastError, "404")
		rc.fail.Store(func(int) int { return 200 })
		_, err = c.EnableWebhook(t.Context(), w.ID)
		require.NoError(t, err)
		waitFor(t, "the rest delivered", func() bool { return len(rc.received()) >= 16 })
		require.Len(t, rc.received(), 16, "nothing lost, nothing twice")

		for _, tc := range []struct {
			body  any
			field string
		}{
			{wire.CreateWebhook{}, "url"},
			{wire.CreateWebhook{URL: "ftp://x"}, "url"},
			{wire.CreateWebhook{URL: "http://x", Types: []string{"task.exploded"}}, "types"},
			{wire.CreateWebhook{URL: "http://x", Workflow: "a/b/c"}, "workflow"},
		} {
			r := en.do("POST", "/v1/webhooks", writer, tc.body)
			require.Equal(t, 400, r.status, "%+v: %s", tc.body, r.body)
			if tc.field != "" {
				_, field := r.errorCode(t)
				require.Equal(t, tc.field, field)
			}
		}
		require.NoError(t, c.DeleteWebhook(t.Context(), w.ID))
		require.ErrorIs(t, c.DeleteWebhook(t.Context(), w.ID), store.ErrNotFound)

		// The workflow filter takes the forms every filter takes.
		for _, body := range []wire.CreateWebhook{
			{URL: "http://x", Workflow: "ev/add"},
			{URL: "http://x", Workflow: "add"},
			{URL: "http://x", Namespace: "ev", Workflow: "add"},
		} {
			hook, err := c.CreateWebhook(t.Context(), body)
			require.NoError(t, err, "%+v", body)
			require.NoError(t, c.DeleteWebhook(t.Context(), hook.ID))
		}
		_, err = c.CreateWebhook(t.Context(), wire.CreateWebhook{URL: "http://x", Workflow: "nosuch"})
		require.ErrorIs(t, err, store.ErrNotFound)
	})
}

// TestWebhookURLHidesPassword: a webhook's URL keeps its user:password
// for deliveries, but no answer shows the password: not the creation's,
// not the list's, not the enabling's, nor the refusal of a URL that is not
// one a webhook takes.
func TestWebhookURLHidesPassword(t *testing.T) {
	t.Parallel()
	const password = "S3cretPw"
	eachBackend(t, func(t *testing.T, open storeFactory) {
		en := newEnv(t, open(t), server.Options{})
		writer := en.key(server.PermWebhooksWrite, server.PermWebhooksRead)
		url := "https://alice:" + password + "@hooks.example/weft?tenant=7"
		r := en.do("POST", "/v1/webhooks", writer, wire.CreateWebhook{URL: url})
		require.Equal(t, 201, r.status, "%s", r.body)
		var created wire.Webhook
		r.json(t, &created)
		stored, err := en.st.Webhooks(t.Context())
		require.NoError(t, err)
		require.Len(t, stored, 1)
		require.Equal(t, url, stored[0].URL, "the stored URL keeps its credentials for deliveries")

		for _, tt := range []struct {
			name   string
			method string
			path   string
			body   any
			status int
		}{
			{"create", "POST", "/v1/webhooks", wire.CreateWebhook{URL: url}, 201},
			{"list", "GET", "/v1/webhooks", nil, 200},
			{"enable", "POST", "/v1/webhooks/" + itoa(created.ID) + "/enable", nil, 200},
			{"refused scheme", "POST", "/v1/webhooks", wire.CreateWebhook{URL: "ftp://alice:" + password + "@hooks.example/"}, 400},
			{"refused parse", "POST", "/v1/webhooks", wire.CreateWebhook{URL: "https://alice:" + password + "@hooks.example:port/"}, 400},
			{"refused types", "POST", "/v1/webhooks", wire.CreateWebhook{URL: url, Types: []string{"task.exploded"}}, 400},
		} {
			// In turn: the first row adds the second webhook counted below.
			t.Run(tt.name, func(t *testing.T) {
				r := en.do(tt.method, tt.path, writer, tt.body)
				require.Equal(t, tt.status, r.status, "%s", r.body)
				require.NotContains(t, string(r.body), password)
				if tt.status < 300 {
					require.Contains(t, string(r.body), "https://alice:xxxxx@hooks.example/weft?tenant=7",
						"the URL shows who it is, not the password")
				}
			})
		}
		// Both creations are stored with their credentials; the Go API
		// lists them as the API does.
		stored, err = en.st.Webhooks(t.Context())
		require.NoError(t, err)
		require.Len(t, stored, 2)
		listed, err := en.e.Webhooks(t.Context())
		require.NoError(t, err)
		require.Len(t, listed, 2)
		for i, w := range stored {
			require.Equal(t, url, w.URL)
			require.Equal(t, "https://alice:xxxxx@hooks.example/weft?tenant=7", listed[i].URL)
		}
	})
}
