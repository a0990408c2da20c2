package metrics

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestStepLabel(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ name, want string }{
		{"charge", "charge"},
		{"fan[0]", "fan"},
		{"fan[1234]", "fan"},
		{"[odd]", "[odd]"},
		{"a]", "a]"},
	} {
		require.Equal(t, tt.want, stepLabel(tt.name), tt.name)
	}
}
