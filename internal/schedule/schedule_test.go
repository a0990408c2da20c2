package schedule

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParse(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		expr, tz string
		ok       bool
	}{
		{"*/5 * * * *", "", true},
		{"30 */5 * * * *", "", true}, // seconds field
		{"@hourly", "Europe/Paris", true},
		{"@every 30s", "", true},
		{"@every 500ms", "", false},
		{"", "", false},
		{"61 * * * *", "", false},
		{"* * *", "", false},
		{"CRON_TZ=UTC * * * * *", "", false},
		{"@daily", "Mars/Olympus", false},
		{"@daily", "Local", false},
		{"@daily", "localtime", false},
		{"@daily", "posixrules", false},
		{"@daily", "right/Europe/Paris", false},
		{"0 0 29 2 *", "", true},    // every leap year
		{"0 0 30 2 *", "", false},   // never
		{"0 0 31 4,6 *", "", false}, // never
	} {
		_, err := Parse(tc.expr, tc.tz)
		require.Equal(t, tc.ok, err == nil, "%q in %q: %v", tc.expr, tc.tz, err)
	}
}

// TestNeverFires: an expression that names no time is refused by name,
// and a plan from a zero tick (one stored before that) ends at once,
// firing nothing.
func TestNeverFires(t *testing.T) {
	t.Parallel()
	_, err := Parse("0 0 30 2 *", "")
	require.ErrorIs(t, err, ErrNeverFires)
	c, err := Parse("@hourly", "")
	require.NoError(t, err)
	p := c.Decide(time.Time{}, time.Now(), All, 3)
	require.Empty(t, p.Fire)
	require.True(t, p.Next.IsZero())
}

// TestDaylightSaving pins the parser's rules at America/New_York's
// transitions of 2026: spring forward on March 8 (02:00 becomes 03:00),
// fall back on November 1 (02:00 becomes 01:00 again). The parser skips a
// wall time that does not exist and fires one that occurs twice at both
// instants.
func TestDaylightSaving(t *testing.T) {
	t.Parallel()
	ny, err := time.LoadLocation("America/New_York")
	require.NoError(t, err)
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		require.NoError(t, err)
		return v.UTC()
	}
	for _, tc := range []struct {
		name, expr string
		after      string
		want       []string // the next ticks, as RFC 3339 in New York time
	}{
		{"daily in the skipped hour does not run that day", "30 2 * * *", "2026-03-07T12:00:00-05:00",
			[]string{"2026-03-09T02:30:00-04:00"}},
		{"daily before the gap keeps its wall time", "30 1 * * *", "2026-03-07T12:00:00-05:00",
			[]string{"2026-03-08T01:30:00-05:00", "2026-03-09T01:30:00-04:00"}},
		{"hourly skips the missing hour", "0 * * * *", "2026-03-08T00:30:00-05:00",
			[]string{"2026-03-08T01:00:00-05:00", "2026-03-08T03:00:00-04:00", "2026-03-08T04:00:00-04:00"}},
		{"daily in the repeated hour runs at both instants", "30 1 * * *", "2026-10-31T12:00:00-04:00",
			[]string{"2026-11-01T01:30:00-04:00", "2026-11-01T01:30:00-05:00", "2026-11-02T01:30:00-05:00"}},
		{"hourly runs the repeated hour twice", "0 * * * *", "2026-11-01T00:30:00-04:00",
			[]string{"2026-11-01T01:00:00-04:00", "2026-11-01T01:00:00-05:00", "2026-11-01T02:00:00-05:00"}},
		{"@every counts elapsed time", "@every 1h", "2026-03-08T00:30:00-05:00",
			[]string{"2026-03-08T01:30:00-05:00", "2026-03-08T03:30:00-04:00"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := Parse(tc.expr, "America/New_York")
			require.NoError(t, err)
			var got []string
			tick := at(tc.after)
			for range tc.want {
				tick = c.Next(tick)
				got = append(got, tick.In(ny).Format(time.RFC3339))
			}
			require.Equal(t, tc.want, got)
		})
	}
}

func TestDecide(t *testing.T) {
	t.Parallel()
	minute, err := Parse("* * * * *", "")
	require.NoError(t, err)
	t0 := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	mins := func(ms ...int) []time.Time {
		out := make([]time.Time, len(ms))
		for i, m := range ms {
			out[i] = t0.Add(time.Duration(m) * time.Minute)
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		now    time.Time
		policy string
		max    int
		fire   []time.Time
		missed int
	}{
		{"on time", t0.Add(2 * time.Second), Skip, 0, mins(0), 0},
		{"not due", t0.Add(-time.Second), All, 0, nil, 0},
		{"skip drops a gap", t0.Add(30*time.Minute + 5*time.Second), Skip, 0, mins(30), 30},
		{"skip fires a tick late within the grace", t0.Add(2*time.Minute + 50*time.Second), Skip, 0, mins(2), 2},
		{"latest fires one", t0.Add(30*time.Minute + 90*time.Second), Latest, 0, mins(31), 31},
		{"all fires each", t0.Add(3*time.Minute + time.Second), All, 10, mins(0, 1, 2, 3), 0},
		{"all is bounded, most recent kept", t0.Add(30*time.Minute + time.Second), All, 3, mins(28, 29, 30), 28},
		{"all default bound", t0.Add(59 * time.Minute), All, 0, mins(50, 51, 52, 53, 54, 55, 56, 57, 58, 59), 50},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := minute.Decide(t0, tc.now, tc.policy, tc.max)
			require.Equal(t, tc.fire, p.Fire)
			require.Equal(t, tc.missed, p.Missed)
			require.True(t, p.Next.After(tc.now))
			require.Equal(t, minute.Next(tc.now), p.Next)
		})
	}
}

// TestDecideLongGap: a one-second schedule a month behind walks a bounded
// number of ticks and still keeps the most recent ones.
func TestDecideLongGap(t *testing.T) {
	t.Parallel()
	sec, err := Parse("@every 1s", "")
	require.NoError(t, err)
	t0 := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	now := t0.Add(30 * 24 * time.Hour)
	p := sec.Decide(t0, now, All, 3)
	require.Equal(t, []time.Time{now.Add(-2 * time.Second), now.Add(-time.Second), now}, p.Fire)
	require.Equal(t, now.Add(time.Second), p.Next)
	require.InDelta(t, 30*24*3600-2, p.Missed, 5)
}

// TestSkipBeyondGrace: under skip, an hourly tick found more than Grace
// late is dropped, and the next one is the next hour.
func TestSkipBeyondGrace(t *testing.T) {
	t.Parallel()
	hourly, err := Parse("@hourly", "")
	require.NoError(t, err)
	t0 := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	p := hourly.Decide(t0, t0.Add(Grace+time.Second), Skip, 0)
	require.Empty(t, p.Fire)
	require.Equal(t, 1, p.Missed)
	require.Equal(t, t0.Add(time.Hour), p.Next)
	p = hourly.Decide(t0, t0.Add(Grace), Skip, 0)
	require.Equal(t, []time.Time{t0}, p.Fire)
}
