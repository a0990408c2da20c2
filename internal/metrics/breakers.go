package metrics

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weftrun/weft"
)

// breakerCollector reports the circuit breakers of steps, read from the
// store when scraped (one small table): weft_breaker_state is 1 for each
// breaker's current state (closed, open, half-open) and 0 for the others,
// weft_breaker_failures its consecutive failed attempts, and
// weft_breakers_open how many are not closed.
type breakerCollector struct {
	engine *weft.Engine
	log    *slog.Logger
}

var (
	breakerStateDesc = prometheus.NewDesc("weft_breaker_state",
		"Circuit breakers of steps by key (namespace/workflow/step): 1 for the breaker's current state, 0 for the others.",
		[]string{"breaker", "state"}, nil)
	breakerFailuresDesc = prometheus.NewDesc("weft_breaker_failures",
		"Consecutive failed attempts counted by each circuit breaker.", []string{"breaker"}, nil)
	breakersOpenDesc = prometheus.NewDesc("weft_breakers_open",
		"Circuit breakers open or half-open (holding their steps), across every engine on the database.", nil, nil)
)

func (c *breakerCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- breakerStateDesc
	ch <- breakerFailuresDesc
	ch <- breakersOpenDesc
}

func (c *breakerCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	bs, err := c.engine.Breakers(ctx)
	if err != nil {
		c.log.Error("metrics: breakers", "error", err)
		ch <- prometheus.NewInvalidMetric(breakersOpenDesc, err)
		return
	}
	open := 0
	for _, b := range bs {
		for _, st := range []string{weft.BreakerClosed, weft.BreakerOpen, weft.BreakerHalfOpen} {
			v := 0.0
			if b.State == st {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(breakerStateDesc, prometheus.GaugeValue, v, b.Key, st)
		}
		ch <- prometheus.MustNewConstMetric(breakerFailuresDesc, prometheus.GaugeValue, float64(b.Failures), b.Key)
		if b.State != weft.BreakerClosed {
			open++
		}
	}
	ch <- prometheus.MustNewConstMetric(breakersOpenDesc, prometheus.GaugeValue, float64(open))
}
