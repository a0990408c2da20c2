package server

import (
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weftrun/weft"
	enginemetrics "github.com/weftrun/weft/internal/metrics"
)

// metrics are the server's Prometheus metrics: the engine's (package
// internal/metrics, which every engine serves, remote workers' steps
// included since the server publishes their events) and the API's own.
type metrics struct {
	engine      *enginemetrics.Metrics
	requests    *prometheus.CounterVec
	reqDuration *prometheus.HistogramVec
	rejected    *prometheus.CounterVec
}

func newMetrics(e *weft.Engine, log *slog.Logger) *metrics {
	m := &metrics{
		engine: enginemetrics.New(e, log),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "weft_http_requests_total",
			Help: "API requests by route and status code."}, []string{"route", "code"}),
		reqDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "weft_http_request_duration_seconds",
			Help:    "API request latency by route and status code; the event stream and the workers' long-poll claims are not timed.",
			Buckets: prometheus.DefBuckets}, []string{"route", "code"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "weft_http_rejected_total",
			Help: "Requests refused before any work: overload (503), body too large (413)."}, []string{"reason"}),
	}
	m.engine.Registry.MustRegister(m.requests, m.reqDuration, m.rejected)
	return m
}

// request counts a request and, where timed, observes its duration.
func (m *metrics) request(route string, code int, d time.Duration, timed bool) {
	c := strconv.Itoa(code)
	m.requests.WithLabelValues(route, c).Inc()
	if timed {
		m.reqDuration.WithLabelValues(route, c).Observe(d.Seconds())
	}
}

func (m *metrics) handler() http.Handler { return m.engine.Handler() }

// close stops counting the engine's events.
func (m *metrics) close() { m.engine.Close() }
