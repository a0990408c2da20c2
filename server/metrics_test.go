package server_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/server"
	"github.com/weftrun/weft/wire"
)

// TestRequestDurationTimesAnswersOnly: the API's latency histogram has a
// route and a code for every request that answers, and no series for the
// event stream or a worker's long-poll claim, which last as long as they
// wait (both are still counted).
func TestRequestDurationTimesAnswersOnly(t *testing.T) {
	t.Parallel()
	en := newEnv(t, backends()["sqlite"](t), server.Options{})
	require.Equal(t, 404, en.do("GET", "/v1/tasks/999", en.admin, nil).status)

	var reg wire.WorkerRegistered
	en.ok(201, "POST", "/v1/workers", map[string]any{"name": "m", "handlers": []string{"py.none"}}, &reg)
	en.ok(200, "POST", "/v1/workers/"+reg.WorkerID+"/claim", map[string]any{"handlers": []string{"py.none"}, "wait_ms": 50}, nil)

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", en.url+"/v1/events", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+en.admin)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	cancel()

	r := en.do("GET", "/metrics", "", nil)
	require.Equal(t, 200, r.status)
	body := string(r.body)
	require.Equal(t, float64(1), metricValue(t, body, "weft_http_request_duration_seconds_count", `route="GET /v1/tasks/{id}"`, `code="404"`))
	require.NotContains(t, body, `weft_http_request_duration_seconds_count{code="200",route="GET /v1/events"}`)
	require.False(t, strings.Contains(body, `weft_http_request_duration_seconds_count{code="200",route="POST /v1/workers/{id}/claim"}`))
	require.Equal(t, float64(1), metricValue(t, body, "weft_http_requests_total", `route="POST /v1/workers/{id}/claim"`))
	// The stream is counted once it ends, which the server sees after the
	// client left: poll the scrape for it.
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(string(en.do("GET", "/metrics", "", nil).body), `weft_http_requests_total{code="200",route="GET /v1/events"}`) {
		require.True(t, time.Now().Before(deadline), "the event stream was never counted")
		time.Sleep(10 * time.Millisecond) // polling a condition
	}
}
