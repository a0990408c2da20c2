package postgres

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestNextPartition: the next partition follows the last one, or, past a
// gap, starts at the span the clock is in; it is never shorter than half a
// span; its name gives its bounds back, and no other name parses.
func TestNextPartition(t *testing.T) {
	t.Parallel()
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		require.NoError(t, err)
		return v
	}
	now := at("2026-12-07T06:07:30Z")
	for _, c := range []struct {
		name   string
		parts  []partition
		span   time.Duration
		lo, hi string
	}{
		{"none yet", nil, 5 * time.Minute, "2026-12-07T06:05:00Z", "2026-12-07T06:10:00Z"},
		{"after the last", []partition{newPartition(at("2026-12-07T06:10:00Z"), at("2026-12-07T06:15:00Z"))}, 5 * time.Minute,
			"2026-12-07T06:15:00Z", "2026-12-07T06:20:00Z"},
		{"past a gap", []partition{newPartition(at("2026-12-06T06:00:00Z"), at("2026-12-06T07:00:00Z"))}, time.Hour,
			"2026-12-07T06:00:00Z", "2026-12-07T07:00:00Z"},
		{"a longer span than the last's", []partition{newPartition(at("2026-12-07T06:05:00Z"), at("2026-12-07T06:10:00Z"))}, time.Hour,
			"2026-12-07T06:10:00Z", "2026-12-07T07:00:00Z"},
		{"never a sliver", []partition{newPartition(at("2026-12-07T06:50:00Z"), at("2026-12-07T06:55:00Z"))}, time.Hour,
			"2026-12-07T06:55:00Z", "2026-12-07T08:00:00Z"},
	} {
		p := nextPartition(now, c.span, c.parts)
		require.Equal(t, at(c.lo), p.lo, c.name)
		require.Equal(t, at(c.hi), p.hi, c.name)
		back, ok := parsePartition(p.name)
		require.True(t, ok, c.name)
		require.Equal(t, p, back, c.name)
	}
	for _, name := range []string{"audit_kept", "audit_default", "audit_p20261207t060000", "audit_p20261207t070000_20261207t060000", "audit_px_y"} {
		_, ok := parsePartition(name)
		require.False(t, ok, name)
	}
}
