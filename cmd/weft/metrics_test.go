package main

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/state"
)

// metricsYAML is a chain of two exec steps.
const metricsYAML = `namespace: shop
name: orders
version: "1"
steps:
  - name: check
    handler: exec
    config: {command: ["true"]}
  - name: ship
    handler: exec
    depends_on: [check]
    config: {command: ["true"]}
`

// TestWorkerServesMetrics: `weft worker --metrics-addr` serves the engine's
// metrics: outcomes, step durations and queue waits by workflow and step,
// the queue depth, the build, and trace exemplars on the durations of
// sampled attempts (OpenMetrics); it serves health checks too.
func TestWorkerServesMetrics(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "weft.db")
	tpl := writeFile(t, dir, "orders.yaml", metricsYAML)
	requireCode(t, 0, weftCLI(t, "submit", tpl, "--db", db))
	requireCode(t, 0, weftCLI(t, "submit", tpl, "--db", db, "--run-at", "1h"))

	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	env := map[string]string{"WEFT_DB": db, "OTEL_TRACES_EXPORTER": "console"}
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- newApp(strings.NewReader(""), &stdout, &stderr, func(k string) string { return env[k] }).
			execute(ctx, []string{"worker", "--metrics-addr", "127.0.0.1:0"})
	}()
	re := regexp.MustCompile(`metrics on (http://[^\s"]+)/metrics`)
	var base string
	require.Eventually(t, func() bool {
		m := re.FindStringSubmatch(stderr.String())
		if m != nil {
			base = m[1]
		}
		return m != nil
	}, 10*time.Second, 5*time.Millisecond, "no metrics address: %s", stderr.String())
	require.Eventually(t, func() bool { return taskState(t.Context(), db, 1) == state.TaskCompleted },
		10*time.Second, 10*time.Millisecond, "the worker did not finish the task")

	get := func(path, accept string) (int, string) {
		req, err := http.NewRequestWithContext(t.Context(), "GET", base+path, nil)
		require.NoError(t, err)
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	code, body := get("/metrics", "")
	require.Equal(t, http.StatusOK, code)
	for _, want := range []string{
		`weft_steps_completed_total{namespace="shop",outcome="completed",step="check",worker="engine",workflow="orders"} 1`,
		`weft_steps_completed_total{namespace="shop",outcome="completed",step="ship",worker="engine",workflow="orders"} 1`,
		`weft_step_duration_seconds_count{namespace="shop",outcome="completed",step="ship",workflow="orders"} 1`,
		`weft_step_queue_wait_seconds_count{namespace="shop",step="check",workflow="orders"} 1`,
		`weft_steps_claimed_total{namespace="shop",worker="engine"} 2`,
		`weft_steps_in_flight{namespace="shop"} 0`,
		`weft_queue_depth{namespace="shop",state="waiting"} 1`,
		`weft_engine_degraded 0`,
		`weft_build_info{`,
	} {
		require.Contains(t, body, want)
	}
	require.NotContains(t, body, "task_id", "no task ids in labels")

	_, open := get("/metrics", "application/openmetrics-text; version=1.0.0")
	require.Regexp(t, `weft_step_duration_seconds_bucket\{[^}]*step="check"[^}]*\} 1 # \{trace_id="[0-9a-f]{32}"\}`, open,
		"durations of sampled attempts carry their trace as an exemplar")

	code, ready := get("/health/ready", "")
	require.Equal(t, http.StatusOK, code)
	require.JSONEq(t, `{"status": "ok", "checks": {"database": "ok", "engine": "ok"}}`, ready, "as weft serve answers")
	stop()
	require.Equal(t, 0, <-done, stderr.String())
}

// TestServeMetricsElsewhere: `weft serve --metrics-addr` serves /metrics
// (the engine's and the API's) on that address alone: the API's address,
// which every client reaches, answers 404 there.
func TestServeMetricsElsewhere(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "weft.db")
	p := startServeProcess(t, db, "--metrics-addr", "127.0.0.1:0")
	re := regexp.MustCompile(`metrics on (http://[^\s"]+)/metrics`)
	var base string
	require.Eventually(t, func() bool {
		m := re.FindStringSubmatch(p.logs.String())
		if m != nil {
			base = m[1]
		}
		return m != nil
	}, 10*time.Second, 5*time.Millisecond, "no metrics address: %s", p.logs.String())
	get := func(url string) (int, string) {
		resp, err := http.Get(url)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	code, _ := get(p.url + "/health/ready")
	require.Equal(t, http.StatusOK, code)
	code, _ = get(p.url + "/metrics")
	require.Equal(t, http.StatusNotFound, code, "the API's address does not show the metrics")
	code, body := get(base + "/metrics")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "weft_build_info{")
	require.Contains(t, body, `weft_http_requests_total{code="200",route="GET /health/ready"}`, "the API's own metrics are there too")
	require.NoError(t, p.stop())
}
