package webhook

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/wire"
)

// TestPost: a delivery is signed with the webhook's secret, and the
// receiver's status says whether a failure passes (408, 429, 5xx, with
// Retry-After) or is for good (any other non-2xx, a redirect included).
func TestPost(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status     int
		retryAfter string
		failed     bool
		permanent  bool
		wait       time.Duration
	}{
		{status: 200},
		{status: 204},
		{status: 302, failed: true, permanent: true},
		{status: 400, failed: true, permanent: true},
		{status: 408, failed: true},
		{status: 429, retryAfter: "7", failed: true, wait: 7 * time.Second},
		{status: 503, failed: true},
	} {
		t.Run(http.StatusText(tc.status), func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				ts, sig, _ := strings.Cut(strings.TrimPrefix(r.Header.Get(wire.SignatureHeader), "t="), ",v1=")
				mac := hmac.New(sha256.New, []byte("whsec_x"))
				mac.Write([]byte(ts + "."))
				mac.Write(body)
				if sig != hex.EncodeToString(mac.Sum(nil)) || r.Header.Get("Weft-Event-Id") != "c1" {
					w.WriteHeader(http.StatusUnauthorized)
					return
				}
				if tc.retryAfter != "" {
					w.Header().Set("Retry-After", tc.retryAfter)
				}
				if tc.status == 302 {
					w.Header().Set("Location", "/elsewhere")
				}
				w.WriteHeader(tc.status)
			}))
			defer srv.Close()
			d := New(nil, slog.Default(), time.Second, nil)
			why, permanent, wait := d.post(context.Background(), store.Webhook{ID: 1, URL: srv.URL + "/hook?token=secret", Secret: "whsec_x"},
				store.HistoryEvent{Cursor: "c1", Type: "task.completed"})
			require.Equal(t, tc.failed, why != "", why)
			require.Equal(t, tc.permanent, permanent)
			require.Equal(t, tc.wait, wait)
			require.NotContains(t, why, "secret", "the URL's query is redacted")
		})
	}
}

// failures is a Store that hands out one event and records the failures
// of deliveries (no other method is called).
type failures struct {
	Store
	reasons []string
}

func (f *failures) History(context.Context, store.HistoryQuery) ([]store.HistoryEvent, error) {
	return []store.HistoryEvent{{Cursor: "c1", Type: "task.completed"}}, nil
}

func (f *failures) WebhookFailed(_ context.Context, _ int64, reason string, _ time.Time, _ bool) error {
	f.reasons = append(f.reasons, reason)
	return nil
}

// TestDeliveryErrorHidesPassword: why a delivery failed is stored on the
// webhook (and shown as its last_error) and logged, without the password
// of the webhook's URL, however the failure quotes the URL.
func TestDeliveryErrorHidesPassword(t *testing.T) {
	t.Parallel()
	refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer refusing.Close()
	untrusted := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	untrusted.Config.ErrorLog = log.New(io.Discard, "", 0) // its handshake errors
	untrusted.StartTLS()
	defer untrusted.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := l.Addr().String() // nothing listens there any more
	require.NoError(t, l.Close())

	withUser := func(base, userinfo string) string { return strings.Replace(base, "://", "://"+userinfo+"@", 1) }
	for _, tc := range []struct {
		name     string
		url      string
		password []string // as written and decoded
	}{
		{"receiver fails", withUser(refusing.URL, "alice:S3cretPw") + "/hook", []string{"S3cretPw"}},
		{"connection refused", withUser("http://"+closed, "alice:S3cretPw") + "/hook", []string{"S3cretPw"}},
		{"untrusted certificate", withUser(untrusted.URL, "alice:S3cretPw") + "/hook", []string{"S3cretPw"}},
		{"escaped password", withUser("http://"+closed, "alice:p%40ss%2Fw0rd") + "/hook", []string{"p%40ss%2Fw0rd", "p@ss/w0rd"}},
		// A stored URL the request cannot be made of (one stored before
		// URLs were checked): the error quotes it whole.
		{"URL that does not parse", withUser("http://"+closed, "alice:S3cretPw") + "/%zz", []string{"S3cretPw"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var logged strings.Builder
			s := &failures{}
			d := New(s, slog.New(slog.NewTextHandler(&logged, nil)), time.Second, nil)
			d.deliver(context.Background(), store.Webhook{ID: 1, URL: tc.url, Secret: "whsec_x", State: store.WebhookActive})
			require.Len(t, s.reasons, 1)
			require.Contains(t, logged.String(), "reason=", "the failure is logged")
			for _, pw := range tc.password {
				require.NotContains(t, s.reasons[0], pw, "the stored failure")
				require.NotContains(t, logged.String(), pw, "the log")
			}
		})
	}
}

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		h    string
		want time.Duration
	}{
		{"", 0},
		{"7", 7 * time.Second},
		{"0", 0},
		{"-3", 0},
		{"soon", 0},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0},
	} {
		require.Equal(t, tc.want, retryAfter(tc.h, now), "%q", tc.h)
	}
}
