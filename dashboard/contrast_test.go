package dashboard_test

import (
	"math"
	"os"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/state"
)

// TestStateColoursContrast checks the colours of app.css against WCAG 2.1
// AA's 4.5:1 for text, for every state, including those that no page of
// the accessibility test happens to show: white on a state's colour (a
// badge, a finished node of the graph), a state's colour on white (the
// other nodes), and the muted and link colours on the page's backgrounds.
func TestStateColoursContrast(t *testing.T) {
	t.Parallel()
	css, err := os.ReadFile("assets/app.css")
	require.NoError(t, err)
	vars := map[string]string{}
	for _, m := range regexp.MustCompile(`--([a-z]+):#([0-9a-f]{6}|[0-9a-f]{3});`).FindAllStringSubmatch(string(css), -1) {
		hex := m[2]
		if len(hex) == 3 {
			hex = string([]byte{hex[0], hex[0], hex[1], hex[1], hex[2], hex[2]})
		}
		vars[m[1]] = "#" + hex
	}
	colour := func(name string) string {
		t.Helper()
		c, ok := vars[name]
		require.True(t, ok, "app.css defines no --%s", name)
		return c
	}
	const white = "#ffffff"
	states := map[string]bool{}
	for _, s := range state.Tasks {
		states[string(s)] = true
	}
	for _, s := range state.Steps {
		states[string(s)] = true
	}
	for s := range states {
		require.GreaterOrEqual(t, contrast(white, colour(s)), 4.5, "white text on --%s (%s)", s, colour(s))
	}
	for _, pair := range [][2]string{
		{"muted", "bg"}, {"muted", "panel"}, {"ink", "bg"}, {"accent", "bg"}, {"accent", "panel"},
		{"failed", "panel"}, {"danger", "panel"},
	} {
		require.GreaterOrEqual(t, contrast(colour(pair[0]), colour(pair[1])), 4.5, "--%s on --%s", pair[0], pair[1])
	}
}

// contrast is WCAG's contrast ratio of two colours (#rrggbb).
func contrast(a, b string) float64 {
	la, lb := luminance(a), luminance(b)
	return (max(la, lb) + 0.05) / (min(la, lb) + 0.05)
}

// luminance is WCAG's relative luminance of a colour (#rrggbb).
func luminance(hex string) float64 {
	var c [3]float64
	for i := range c {
		n, err := strconv.ParseUint(hex[1+2*i:3+2*i], 16, 8)
		if err != nil {
			panic(err)
		}
		v := float64(n) / 255
		if v <= 0.03928 {
			c[i] = v / 12.92
		} else {
			c[i] = math.Pow((v+0.055)/1.055, 2.4)
		}
	}
	return 0.2126*c[0] + 0.7152*c[1] + 0.0722*c[2]
}
