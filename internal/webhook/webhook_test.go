package webhook

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
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
