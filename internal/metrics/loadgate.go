package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/weftrun/weft"
)

// gateCollector reports the engine's load gate (weft.Config.MaxPressure)
// when scraped; an engine without one reports nothing of it.
type gateCollector struct{ e *weft.Engine }

var (
	gateClosedDesc = prometheus.NewDesc("weft_load_gate_closed",
		"1 while the engine's load gate holds claims back (a host pressure is above its threshold), else 0; absent without --max-pressure.", nil, nil)
	gatePressureDesc = prometheus.NewDesc("weft_load_pressure_ratio",
		"The host's pressure of a resource last read by the load gate (Linux PSI some avg10), from 0 to 1.", []string{"resource"}, nil)
	gateThresholdDesc = prometheus.NewDesc("weft_load_pressure_threshold_ratio",
		"The load gate's threshold of a resource, from 0 to 1.", []string{"resource"}, nil)
)

func (c gateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- gateClosedDesc
	ch <- gatePressureDesc
	ch <- gateThresholdDesc
}

func (c gateCollector) Collect(ch chan<- prometheus.Metric) {
	g := c.e.LoadGate()
	if !g.Enabled {
		return
	}
	closed := 0.0
	if g.Closed {
		closed = 1
	}
	ch <- prometheus.MustNewConstMetric(gateClosedDesc, prometheus.GaugeValue, closed)
	// The gate speaks percent, as PSI and --max-pressure do; metrics
	// speak ratios.
	for r, v := range g.Pressure {
		ch <- prometheus.MustNewConstMetric(gatePressureDesc, prometheus.GaugeValue, v/100, r)
	}
	for r, v := range g.Max {
		ch <- prometheus.MustNewConstMetric(gateThresholdDesc, prometheus.GaugeValue, v/100, r)
	}
}
