// Package metrics holds the Prometheus metrics of an engine, fed by its
// lifecycle events and read from its store and health at each scrape. Both
// "weft serve" (with its HTTP metrics added) and "weft worker
// --metrics-addr" serve them on /metrics.
//
// Every metric is prefixed weft_. Labels are bounded: namespaces, workflow
// and step names come from the registered definitions (an item of a batch
// is labelled with its batch step's name, without its index), outcomes and
// states from fixed lists; no task or step id is ever a label. A duration
// observed for an attempt whose span is sampled carries its trace id as an
// exemplar (served in the OpenMetrics format, which Prometheus asks for).
package metrics

import (
	"context"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/state"
)

// Metrics are one engine's metrics, in a registry of their own to which a
// transport may add its own.
type Metrics struct {
	// Registry holds the metrics; the server registers its HTTP metrics
	// in it too.
	Registry *prometheus.Registry

	submitted   *prometheus.CounterVec
	claimed     *prometheus.CounterVec
	ended       *prometheus.CounterVec
	retries     *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	queueWait   *prometheus.HistogramVec
	inFlight    *prometheus.GaugeVec
	leaseExpiry prometheus.Counter
	pruned      *prometheus.CounterVec
	attention   prometheus.Gauge
	preempted   *prometheus.CounterVec
	deferred    *prometheus.CounterVec
	unsubscribe func()
}

// durationBuckets span a millisecond to half an hour.
var durationBuckets = []float64{.001, .005, .01, .05, .1, .5, 1, 5, 10, 30, 60, 300, 1800}

// New returns the metrics of e, counting its events from now until Close.
func New(e *weft.Engine, log *slog.Logger) *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		submitted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "weft_tasks_submitted_total",
			Help: "Tasks created (duplicates of an idempotency key not counted)."}, []string{"namespace", "workflow"}),
		claimed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "weft_steps_claimed_total",
			Help: "Steps claimed to run, by the engine (worker=\"engine\") or remote workers (worker=\"remote\")."}, []string{"namespace", "worker"}),
		ended: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "weft_steps_completed_total",
			Help: "Attempts that ended, by outcome: completed, failed, retry, snoozed, skipped, interrupted, preempted."},
			[]string{"namespace", "workflow", "step", "outcome", "worker"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "weft_step_retries_total",
			Help: "Failed attempts that scheduled another attempt."}, []string{"namespace", "workflow", "step"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "weft_step_duration_seconds",
			Help:    "How long attempts ran, from claim to outcome (messaging.process.duration); sampled attempts carry their trace id as an exemplar.",
			Buckets: durationBuckets}, []string{"namespace", "workflow", "step", "outcome"}),
		queueWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "weft_step_queue_wait_seconds",
			Help:    "How long steps waited, ready, before they were claimed.",
			Buckets: durationBuckets}, []string{"namespace", "workflow", "step"}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "weft_steps_in_flight",
			Help: "Steps this process's handlers run now."}, []string{"namespace"}),
		leaseExpiry: prometheus.NewCounter(prometheus.CounterOpts{Name: "weft_lease_expiries_total",
			Help: "Steps returned to the queue (or failed) because their engine or worker stopped heartbeating."}),
		pruned: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "weft_tasks_pruned_total",
			Help: "Finished tasks deleted by retention (on the engine that leads maintenance)."}, []string{"namespace"}),
		attention: prometheus.NewGauge(prometheus.GaugeOpts{Name: "weft_tasks_attention",
			Help: "Tasks needing a person, as last counted by the engine that leads maintenance (see weft tasks --attention)."}),
		preempted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "weft_steps_preempted_total",
			Help: "Preemptible steps this engine stopped, or asked a remote worker to stop, to make room for a ready step of higher priority."}, []string{"namespace", "workflow", "step"}),
		deferred: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "weft_rate_deferrals_total",
			Help: "Steps a claim of this process (its own or a remote worker's) deferred for want of a rate-limit token, by rate: a namespace's (workflow and step empty) or a step's (a keyed rate counts under its step, without the key's value)."},
			[]string{"namespace", "workflow", "step"}),
	}
	m.Registry.MustRegister(m.submitted, m.claimed, m.ended, m.retries, m.duration, m.queueWait, m.inFlight, m.leaseExpiry, m.pruned, m.attention, m.preempted, m.deferred,
		&queueCollector{engine: e, log: log}, &breakerCollector{engine: e, log: log}, healthCollector{e}, gateCollector{e},
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{Namespace: "weft"}),
		buildInfo())
	prometheus.WrapRegistererWithPrefix("weft_", m.Registry).MustRegister(collectors.NewGoCollector())
	m.unsubscribe = e.Subscribe(m.observe)
	return m
}

// Close stops counting the engine's events.
func (m *Metrics) Close() { m.unsubscribe() }

// Handler serves the metrics in the Prometheus text format, or OpenMetrics
// (with exemplars) when the scraper asks for it. A metric read from the
// database that cannot be read is left out (and logged by its collector),
// not the whole answer: while the database is down, the metrics that say
// so (weft_engine_degraded, weft_engine_errors_total) are the ones wanted.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{EnableOpenMetrics: true, ErrorHandling: promhttp.ContinueOnError})
}

// stepLabel is the label of a step: an item of a batch, named
// "<batch step>[<n>]", counts under its batch step's name.
func stepLabel(name string) string {
	if strings.HasSuffix(name, "]") {
		if i := strings.LastIndexByte(name, '['); i > 0 {
			return name[:i]
		}
	}
	return name
}

// observe counts one lifecycle event.
func (m *Metrics) observe(ev weft.Event) {
	worker := "engine"
	if ev.Remote {
		worker = "remote"
	}
	switch ev.Kind {
	case weft.EventSubmitted:
		m.submitted.WithLabelValues(ev.Namespace, ev.Workflow).Inc()
	case weft.EventClaimed:
		m.claimed.WithLabelValues(ev.Namespace, worker).Inc()
		m.queueWait.WithLabelValues(ev.Namespace, ev.Workflow, stepLabel(ev.Step)).Observe(ev.QueueWait.Seconds())
		if !ev.Remote {
			m.inFlight.WithLabelValues(ev.Namespace).Inc()
		}
	case weft.EventStepEnded:
		step := stepLabel(ev.Step)
		m.ended.WithLabelValues(ev.Namespace, ev.Workflow, step, ev.Outcome, worker).Inc()
		h := m.duration.WithLabelValues(ev.Namespace, ev.Workflow, step, ev.Outcome)
		if ev.TraceID != "" {
			h.(prometheus.ExemplarObserver).ObserveWithExemplar(ev.Duration.Seconds(), prometheus.Labels{"trace_id": ev.TraceID})
		} else {
			h.Observe(ev.Duration.Seconds())
		}
		if ev.Outcome == weft.OutcomeRetry {
			m.retries.WithLabelValues(ev.Namespace, ev.Workflow, step).Inc()
		}
		// The end of a step this process claimed: an attempt that ended
		// at its claim (a false condition) or one the leader timed out was
		// counted too; attempts are paired with their claims by process.
		if !ev.Remote && ev.Duration > 0 {
			m.inFlight.WithLabelValues(ev.Namespace).Dec()
		}
	case weft.EventLeaseExpired:
		m.leaseExpiry.Add(float64(ev.Count))
	case weft.EventPruned:
		m.pruned.WithLabelValues(ev.Namespace).Add(float64(ev.Count))
	case weft.EventAttention:
		m.attention.Set(float64(ev.Count))
	case weft.EventPreempted:
		m.preempted.WithLabelValues(ev.Namespace, ev.Workflow, stepLabel(ev.Step)).Inc()
	case weft.EventRateDeferred:
		m.deferred.WithLabelValues(ev.Namespace, ev.Workflow, ev.Step).Add(float64(ev.Count))
	}
}

// queueCollector reports the number of unfinished steps by namespace and
// state, read from the store when scraped: weft_queue_depth{state="ready"}
// and {state="running"} are the ready and running steps of a namespace
// across every engine on the database. A namespace's series read 0 when
// it has no such steps instead of vanishing: every namespace with a
// registered workflow, or seen since the collector started, has all four.
type queueCollector struct {
	engine *weft.Engine
	log    *slog.Logger
	mu     sync.Mutex
	seen   map[string]bool // namespaces reported; nil until the first scrape
}

var queueDepthDesc = prometheus.NewDesc("weft_queue_depth", "Unfinished steps by namespace and state (pending, ready, running, waiting), across every engine on the database.",
	[]string{"namespace", "state"}, nil)

// queueStates are the states weft_queue_depth counts: a step's that has
// not ended.
var queueStates = slices.DeleteFunc(slices.Clone(state.Steps), state.Step.Terminal)

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
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen == nil {
		c.seen = map[string]bool{}
		wfs, err := c.engine.Workflows(ctx)
		if err != nil {
			c.log.Warn("metrics: queue depth: list namespaces", "error", err)
		}
		for _, w := range wfs {
			c.seen[w.Namespace] = true
		}
	}
	n := map[string]map[state.Step]int64{}
	for _, q := range counts {
		c.seen[q.Namespace] = true
		if n[q.Namespace] == nil {
			n[q.Namespace] = map[state.Step]int64{}
		}
		n[q.Namespace][q.State] += int64(q.Count)
	}
	for ns := range c.seen {
		for _, st := range queueStates {
			ch <- prometheus.MustNewConstMetric(queueDepthDesc, prometheus.GaugeValue, float64(n[ns][st]), ns, string(st))
		}
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

// buildInfo is weft_build_info: 1, labelled with the binary's version, VCS
// revision and Go version.
func buildInfo() prometheus.Collector {
	b := weft.ReadBuild()
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "weft_build_info",
		Help:        "1, labelled with the version, VCS revision and Go version of the running binary.",
		ConstLabels: prometheus.Labels{"version": b.Version, "revision": b.Revision, "goversion": b.GoVersion}})
	g.Set(1)
	return g
}
