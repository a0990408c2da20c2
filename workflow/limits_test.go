package workflow

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestChildLimitsBounded: limits.max_depth and limits.max_children take
// values from 1 to their upper bounds (MaxDepthLimit, MaxChildrenLimit),
// in a template (with its file and line) and from the Go builder alike.
func TestChildLimitsBounded(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		field  string
		limits func(n int) Limits
		upper  int
	}{
		{"max_depth", func(n int) Limits { return Limits{MaxDepth: n} }, MaxDepthLimit},
		{"max_children", func(n int) Limits { return Limits{MaxChildren: n} }, MaxChildrenLimit},
	} {
		for _, n := range []int{1, tt.upper, tt.upper + 1, 1_000_000} {
			ok := n <= tt.upper
			t.Run(fmt.Sprintf("%s=%d", tt.field, n), func(t *testing.T) {
				t.Parallel()
				yaml := fmt.Sprintf("namespace: t\nname: w\nversion: \"1\"\nlimits:\n  %s: %d\nsteps:\n  - name: a\n    handler: h\n", tt.field, n)
				_, err := Parse("w.yaml", []byte(yaml))
				built := New("t", "w", "1").WithLimits(tt.limits(n)).Step("a", "h").Validate()
				if ok {
					require.NoError(t, err)
					require.NoError(t, built)
					return
				}
				require.EqualError(t, err, fmt.Sprintf("w.yaml:5: limits.%s: must be at most %d, got %d", tt.field, tt.upper, n))
				require.EqualError(t, built, fmt.Sprintf("limits.%s: must be at most %d, got %d", tt.field, tt.upper, n))
			})
		}
	}
}
