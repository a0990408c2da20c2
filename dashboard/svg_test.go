package dashboard_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/dashboard"
)

// TestChartTicks: a chart's gridlines are round values from zero to at
// least its peak, each written as precisely as tells them apart.
func TestChartTicks(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, kind string
		max        float64
		want       []string
	}{
		{"nothing", "per-minute", 0, []string{"0.00", "0.25", "0.50", "0.75", "1.00"}},
		{"a few a minute", "per-minute", 5, []string{"0", "2", "4", "6", "8"}},
		{"a few a week", "per-minute", 0.021, []string{"0.00", "0.01", "0.02", "0.03", "0.04"}},
		{"thousands", "per-minute", 3900, []string{"0", "1000", "2000", "3000", "4000"}},
		{"milliseconds", "seconds", 0.0016, []string{"0.0ms", "0.5ms", "1.0ms", "1.5ms", "2.0ms"}},
		{"seconds", "seconds", 7, []string{"0s", "2s", "4s", "6s", "8s"}},
		{"half failed", "percent", 50, []string{"0%", "20%", "40%", "60%", "80%"}},
		{"all failed", "percent", 100, []string{"0%", "25%", "50%", "75%", "100%"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, c.want, dashboard.ChartTicks(c.max, c.kind))
		})
	}
}
