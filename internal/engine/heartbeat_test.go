package engine

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/weftrun/weft/internal/health"
)

// TestHeartbeatBackoffKeepsTheLease: however many heartbeats failed in a
// row, and whatever the poll interval, the next try comes within a quarter
// of the lease, so that an outage shorter than the lease costs no lease.
func TestHeartbeatBackoffKeepsTheLease(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		poll, lease time.Duration
	}{
		{time.Second, 5 * time.Second},
		{time.Second, 30 * time.Second},
		{10 * time.Millisecond, 10 * time.Second},
		{500 * time.Millisecond, time.Second},
	} {
		for failures := 1; failures <= 12; failures++ {
			wait := heartbeatBackoff(health.Backoff(tt.poll, failures), tt.lease)
			require.LessOrEqual(t, wait, tt.lease/4, "poll %s, lease %s, %d failures", tt.poll, tt.lease, failures)
			require.Positive(t, wait)
		}
	}
}
