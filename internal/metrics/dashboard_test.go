package metrics

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDashboardUsesServedMetrics: every metric the Grafana dashboard
// (docs/grafana/weft.json) queries is one weft serves, so the dashboard
// does not silently go blank when a metric is renamed.
func TestDashboardUsesServedMetrics(t *testing.T) {
	t.Parallel()
	served := map[string]bool{}
	name := regexp.MustCompile(`"(weft_[a-z_]+)"`)
	for _, src := range []string{"metrics.go", "../../server/metrics.go"} {
		b, err := os.ReadFile(src)
		require.NoError(t, err)
		for _, m := range name.FindAllStringSubmatch(string(b), -1) {
			served[m[1]] = true
		}
	}
	b, err := os.ReadFile("../../docs/grafana/weft.json")
	require.NoError(t, err)
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(b, &dash))
	require.NotEmpty(t, dash.Panels)
	used := regexp.MustCompile(`weft_[a-z_]+`)
	for _, p := range dash.Panels {
		require.NotEmpty(t, p.Targets, p.Title)
		for _, tg := range p.Targets {
			for _, m := range used.FindAllString(tg.Expr, -1) {
				base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(m, "_bucket"), "_count"), "_sum")
				require.True(t, served[base], "panel %q queries %s, which weft does not serve", p.Title, m)
			}
		}
	}
}
