package server

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/weftrun/weft"
)

// metrics are the server's Prometheus metrics, every one prefixed weft_.
// Engine work is counted from the engine's lifecycle events (remote workers'
// included, which the server publishes); queue depth is read from the store
// at each scrape.
type metrics struct {
	registry    *prometheus.Registry
	submitted   *prometheus.CounterVec
	claimed     *prometheus.CounterVec
	ended       *prometheus.CounterVec
	retries     *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	leaseExpiry prometheus.Counter
	requests    *prometheus.CounterVec
	reqDuration *prometheus.HistogramVec
	rejected    *prometheus.CounterVec
	pruned      *prometheus.CounterVec
	attention   prometheus.Gauge
}

func newMetrics(e *weft.Engine, log *slog.Logger) *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		submitted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "weft_tasks_submitted_total",
			Help: "Tasks created (duplicates of an idempotency key not counted)."}, []string{"namespace"}),
		claimed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "weft_steps_claimed_total",
			Help: "Steps claimed to run, by the engine (worker=\"engine\") or remote workers (worker=\"remote\")."}, []string{"namespace", "worker"}),
		ended: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "weft_steps_completed_total",
			Help: "Attempts that ended, by outcome: completed, failed, retry, snoozed, interrupted."}, []string{"namespace", "outcome", "worker"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "weft_step_retries_total",
			Help: "Failed attempts that scheduled another attempt."}, []string{"namespace"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "weft_step_duration_seconds",
			Help:    "How long attempts ran, from claim to outcome.",
			Buckets: []float64{.001, .005, .01, .05, .1, .5, 1, 5, 10, 30, 60, 300, 1800}}, []string{"namespace", "outcome"}),
		leaseExpiry: prometheus.NewCounter(prometheus.CounterOpts{Name: "weft_lease_expiries_total",
			Help: "Steps returned to the queue (or failed) because their engine or worker stopped heartbeating."}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "weft_http_requests_total",
			Help: "API requests by route and status code."}, []string{"route", "code"}),
		reqDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "weft_http_request_duration_seconds",
			Help: "API request latency by route.", Buckets: prometheus.DefBuckets}, []string{"route"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "weft_http_rejected_total",
			Help: "Requests refused before any work: overload (503), body too large (413)."}, []string{"reason"}),
		pruned: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "weft_tasks_pruned_total",
			Help: "Finished tasks deleted by retention (on the engine that leads maintenance)."}, []string{"namespace"}),
		attention: prometheus.NewGauge(prometheus.GaugeOpts{Name: "weft_tasks_attention",
			Help: "Tasks needing a person, as last counted by the engine that leads maintenance (see weft tasks --attention)."}),
	}
	m.registry.MustRegister(m.submitted, m.claimed, m.ended, m.retries, m.duration, m.leaseExpiry, m.requests, m.reqDuration, m.rejected, m.pruned, m.attention,
		&queueCollector{engine: e, log: log}, healthCollector{e}, collectors.NewProcessCollector(collectors.ProcessCollectorOpts{Namespace: "weft"}))
	prometheus.WrapRegistererWithPrefix("weft_", m.registry).MustRegister(collectors.NewGoCollector())
	return m
}

// observe counts one lifecycle event.
func (m *metrics) observe(ev weft.Event) {
	worker := "engine"
	if ev.Remote {
		worker = "remote"
	}
	switch ev.Kind {
	case weft.EventSubmitted:
		m.submitted.WithLabelValues(ev.Namespace).Inc()
	case weft.EventClaimed:
		m.claimed.WithLabelValues(ev.Namespace, worker).Inc()
	case weft.EventStepEnded:
		m.ended.WithLabelValues(ev.Namespace, ev.Outcome, worker).Inc()
		m.duration.WithLabelValues(ev.Namespace, ev.Outcome).Observe(ev.Duration.Seconds())
		if ev.Outcome == weft.OutcomeRetry {
			m.retries.WithLabelValues(ev.Namespace).Inc()
		}
	case weft.EventLeaseExpired:
		m.leaseExpiry.Add(float64(ev.Count))
	case weft.EventPruned:
		m.pruned.WithLabelValues(ev.Namespace).Add(float64(ev.Count))
	case weft.EventAttention:
		m.attention.Set(float64(ev.Count))
	}
}

func (m *metrics) request(route string, code int, d time.Duration) {
	m.requests.WithLabelValues(route, strconv.Itoa(code)).Inc()
	m.reqDuration.WithLabelValues(route).Observe(d.Seconds())
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
}

// queueCollector reports the number of unfinished steps by namespace and
// state, read from the store when scraped.
type queueCollector struct {
	engine *weft.Engine
	log    *slog.Logger
}

var queueDepthDesc = prometheus.NewDesc("weft_queue_depth", "Unfinished steps by namespace and state (pending, ready, running, waiting).",
	[]string{"namespace", "state"}, nil)

func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) { ch <- queueDepthDesc }

func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	counts, err := c.engine.QueueDepth(ctx)
	if err != nil {
		c.log.Error("metrics: queue depth", "error", err)
		ch <- prometheus.NewInvalidMetric(queueDepthDesc, err)
		return
	}
	for _, q := range counts {
		ch <- prometheus.MustNewConstMetric(queueDepthDesc, prometheus.GaugeValue, float64(q.Count), q.Namespace, string(q.State))
	}
}

// healthCollector reports the engine's health when scraped.
type healthCollector struct{ e *weft.Engine }

var (
	engineErrorsDesc = prometheus.NewDesc("weft_engine_errors_total",
		"Store calls of the engine's loops that failed (claim, heartbeat, maintenance, completer).", []string{"loop"}, nil)
	engineDegradedDesc = prometheus.NewDesc("weft_engine_degraded",
		"1 while a loop of the engine fails persistently or its database file was deleted or replaced, else 0.", nil, nil)
	engineFailingDesc = prometheus.NewDesc("weft_engine_failing",
		"1 for each loop or check of the engine that fails now.", []string{"check"}, nil)
)

func (c healthCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- engineErrorsDesc
	ch <- engineDegradedDesc
	ch <- engineFailingDesc
}

func (c healthCollector) Collect(ch chan<- prometheus.Metric) {
	h := c.e.Health()
	for _, loop := range []string{"claim", "heartbeat", "maintenance", "completer"} {
		ch <- prometheus.MustNewConstMetric(engineErrorsDesc, prometheus.CounterValue, float64(h.Errors[loop]), loop)
	}
	degraded := 0.0
	if h.Degraded {
		degraded = 1
	}
	ch <- prometheus.MustNewConstMetric(engineDegradedDesc, prometheus.GaugeValue, degraded)
	for check := range h.Failing {
		ch <- prometheus.MustNewConstMetric(engineFailingDesc, prometheus.GaugeValue, 1, check)
	}
}
