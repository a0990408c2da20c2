package outbound_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/internal/outbound"
)

// TestTransportIsItsOwn: each transport is a new one, not
// http.DefaultTransport, and keeps its proxy setting.
func TestTransportIsItsOwn(t *testing.T) {
	t.Parallel()
	a, b := outbound.Transport(), outbound.Transport()
	require.NotSame(t, http.DefaultTransport, a)
	require.NotSame(t, a, b)
	require.NotNil(t, a.Proxy)
}
