package engine

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDefaultHTTPClientOwnsItsConnections: the http steps' default client
// does not share http.DefaultTransport, whose idle connections anything in
// the process may close under a request (see internal/outbound).
func TestDefaultHTTPClientOwnsItsConnections(t *testing.T) {
	t.Parallel()
	var c Config
	require.NoError(t, c.setDefaults())
	require.NotNil(t, c.HTTPClient.Transport)
	require.NotSame(t, http.DefaultTransport, c.HTTPClient.Transport)
}
