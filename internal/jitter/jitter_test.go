package jitter

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestOf(t *testing.T) {
	t.Parallel()
	for _, d := range []time.Duration{0, 1, 5, time.Millisecond, time.Second, time.Hour} {
		for range 100 {
			got := Of(d)
			require.GreaterOrEqual(t, got, d-d/5)
			require.LessOrEqual(t, got, d+d/5)
		}
	}
}
