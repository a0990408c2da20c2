package workflow

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/store"
)

func TestParseFilter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		namespace, wf, ns, name string
		bad                     bool
	}{
		{"", "", "", "", false},
		{"shop", "", "shop", "", false},
		{"", "shop/checkout", "shop", "checkout", false},
		{"shop", "shop/checkout", "shop", "checkout", false},
		{"", "checkout", "", "checkout", false},
		{"shop", "checkout", "shop", "checkout", false},
		{"ops", "shop/checkout", "", "", true},
		{"", "shop/checkout@1", "", "", true},
		{"", "checkout@1", "", "", true},
		{"", "shop/checkout/x", "", "", true},
		{"", "/checkout", "", "", true},
		{"", "shop/", "", "", true},
		{"", "check out", "", "", true},
	}
	for _, tt := range tests {
		ns, name, err := ParseFilter(tt.namespace, tt.wf)
		if tt.bad {
			require.ErrorIs(t, err, store.ErrInvalid, "%q %q", tt.namespace, tt.wf)
			continue
		}
		require.NoError(t, err, "%q %q", tt.namespace, tt.wf)
		require.Equal(t, [2]string{tt.ns, tt.name}, [2]string{ns, name}, "%q %q", tt.namespace, tt.wf)
	}
}
