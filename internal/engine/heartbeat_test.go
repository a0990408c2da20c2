package engine

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestHeartbeatRetryKeepsTheLease: after a failed heartbeat the next try
// comes within half an interval, whatever the interval, so that an outage
// shorter than the lease less half an interval costs no lease (the lease
// is at least two intervals: Config.validate).
func TestHeartbeatRetryKeepsTheLease(t *testing.T) {
	t.Parallel()
	for _, every := range []time.Duration{time.Nanosecond, time.Millisecond, 100 * time.Millisecond, 5 * time.Second, time.Minute} {
		wait := heartbeatRetry(every)
		require.Positive(t, wait)
		require.LessOrEqual(t, wait, max(every/2, time.Millisecond), "interval %s", every)
	}
}
