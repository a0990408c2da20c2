package retry

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// constRnd returns a deterministic rnd that always yields v.
func constRnd(v float64) func() float64 { return func() float64 { return v } }

const maxDuration = time.Duration(math.MaxInt64)

func TestDelayNoJitter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		p       Policy
		attempt int
		want    time.Duration
	}{
		{"exponential 1", Policy{Backoff: Exponential, Initial: time.Second}, 1, time.Second},
		{"exponential 2", Policy{Backoff: Exponential, Initial: time.Second}, 2, 2 * time.Second},
		{"exponential 3", Policy{Backoff: Exponential, Initial: time.Second}, 3, 4 * time.Second},
		{"exponential 10", Policy{Backoff: Exponential, Initial: time.Second}, 10, 512 * time.Second},
		{"empty backoff is exponential", Policy{Initial: time.Second}, 4, 8 * time.Second},
		{"unknown backoff is exponential", Policy{Backoff: "cubic", Initial: time.Second}, 4, 8 * time.Second},
		{"linear 1", Policy{Backoff: Linear, Initial: 3 * time.Second}, 1, 3 * time.Second},
		{"linear 2", Policy{Backoff: Linear, Initial: 3 * time.Second}, 2, 6 * time.Second},
		{"linear 10", Policy{Backoff: Linear, Initial: 3 * time.Second}, 10, 30 * time.Second},
		{"fixed 1", Policy{Backoff: Fixed, Initial: 5 * time.Second}, 1, 5 * time.Second},
		{"fixed 100", Policy{Backoff: Fixed, Initial: 5 * time.Second}, 100, 5 * time.Second},
		{"attempt 0 is attempt 1", Policy{Backoff: Exponential, Initial: time.Second}, 0, time.Second},
		{"negative attempt is attempt 1", Policy{Backoff: Linear, Initial: time.Second}, -5, time.Second},
		{"zero initial", Policy{Backoff: Exponential}, 5, 0},
		{"negative initial is zero", Policy{Backoff: Fixed, Initial: -time.Second}, 1, 0},
		{"negative initial exponential is zero", Policy{Backoff: Exponential, Initial: -time.Second}, 70, 0},

		// The cap.
		{"exponential capped", Policy{Backoff: Exponential, Initial: time.Second, Max: 10 * time.Second}, 5, 10 * time.Second},
		{"exponential just under cap", Policy{Backoff: Exponential, Initial: time.Second, Max: 10 * time.Second}, 4, 8 * time.Second},
		{"exponential at cap", Policy{Backoff: Exponential, Initial: time.Second, Max: 8 * time.Second}, 4, 8 * time.Second},
		{"linear capped", Policy{Backoff: Linear, Initial: time.Second, Max: 10 * time.Second}, 11, 10 * time.Second},
		{"fixed capped", Policy{Backoff: Fixed, Initial: time.Minute, Max: time.Second}, 1, time.Second},
		{"zero max means no cap", Policy{Backoff: Exponential, Initial: time.Second}, 20, 524288 * time.Second},
		{"negative max means no cap", Policy{Backoff: Linear, Initial: time.Second, Max: -1}, 20, 20 * time.Second},

		// Huge attempt numbers.
		{"exponential 63 capped", Policy{Backoff: Exponential, Initial: time.Second, Max: time.Hour}, 63, time.Hour},
		{"exponential 64 capped", Policy{Backoff: Exponential, Initial: time.Second, Max: time.Hour}, 64, time.Hour},
		{"exponential 1000 capped", Policy{Backoff: Exponential, Initial: time.Second, Max: time.Hour}, 1000, time.Hour},
		{"exponential maxint capped", Policy{Backoff: Exponential, Initial: time.Second, Max: time.Hour}, math.MaxInt, time.Hour},
		{"exponential 1ns maxint capped", Policy{Backoff: Exponential, Initial: 1, Max: time.Hour}, math.MaxInt, time.Hour},
		{"exponential 1ns attempt 63 fits", Policy{Backoff: Exponential, Initial: 1}, 63, 1 << 62},
		{"exponential 1ns attempt 64 saturates", Policy{Backoff: Exponential, Initial: 1}, 64, maxDuration},
		{"exponential maxint uncapped saturates", Policy{Backoff: Exponential, Initial: time.Second}, math.MaxInt, maxDuration},
		{"linear maxint capped", Policy{Backoff: Linear, Initial: time.Second, Max: time.Hour}, math.MaxInt, time.Hour},
		{"linear maxint uncapped saturates", Policy{Backoff: Linear, Initial: time.Second}, math.MaxInt, maxDuration},
		{"linear 1ns maxint is the largest duration", Policy{Backoff: Linear, Initial: 1}, math.MaxInt, maxDuration},
		{"fixed maxint", Policy{Backoff: Fixed, Initial: time.Second, Max: time.Hour}, math.MaxInt, time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, tt.p.Delay(tt.attempt, nil), "nil rnd")
			// Without jitter rnd is irrelevant.
			require.Equal(t, tt.want, tt.p.Delay(tt.attempt, constRnd(0.999)), "rnd ignored without jitter")
		})
	}
}

func TestDelayJitter(t *testing.T) {
	t.Parallel()
	base := Policy{Backoff: Fixed, Initial: 10 * time.Second}
	with := func(p Policy, jitter float64) Policy { p.Jitter = jitter; return p }
	tests := []struct {
		name    string
		p       Policy
		attempt int
		rnd     float64
		want    time.Duration
	}{
		{"lowest factor", with(base, 0.5), 1, 0, 5 * time.Second},
		{"middle factor", with(base, 0.5), 1, 0.5, 10 * time.Second},
		{"quarter", with(base, 0.5), 1, 0.25, 7500 * time.Millisecond},
		{"near highest factor", with(base, 0.5), 1, 0.75, 12500 * time.Millisecond},
		{"full jitter lowest is zero", with(base, 1), 1, 0, 0},
		{"full jitter highest doubles", with(base, 1), 1, 1, 20 * time.Second},
		{"jitter above 1 is clamped", with(base, 3), 1, 0, 0},
		{"negative jitter is none", with(base, -0.5), 1, 0, 10 * time.Second},
		{"NaN jitter is none", with(base, math.NaN()), 1, 0, 10 * time.Second},
		{"rnd below 0 is clamped", with(base, 0.5), 1, -7, 5 * time.Second},
		{"rnd above 1 is clamped", with(base, 0.5), 1, 7, 15 * time.Second},
		{"NaN rnd is 0", with(base, 0.5), 1, math.NaN(), 5 * time.Second},
		{"exponential with jitter", Policy{Backoff: Exponential, Initial: time.Second, Jitter: 0.1}, 4, 0, 7200 * time.Millisecond},
		{"linear with jitter", Policy{Backoff: Linear, Initial: time.Second, Jitter: 0.2}, 5, 1, 6 * time.Second},
		{"jitter capped at max again", Policy{Backoff: Fixed, Initial: 10 * time.Second, Max: 11 * time.Second, Jitter: 0.5}, 1, 0.99, 11 * time.Second},
		{"jitter may shorten a capped delay", Policy{Backoff: Exponential, Initial: time.Second, Max: 10 * time.Second, Jitter: 0.5}, 100, 0, 5 * time.Second},
		{"jitter on saturated delay without cap", Policy{Backoff: Exponential, Initial: time.Second, Jitter: 0.5}, 1000, 0.99, maxDuration},
		{"jitter on saturated delay shortened", Policy{Backoff: Exponential, Initial: time.Second, Jitter: 1}, 1000, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, tt.p.Delay(tt.attempt, constRnd(tt.rnd)))
		})
	}
}

// TestDelayJitterBounds sweeps rnd over [0,1) and checks that every delay
// stays within [(1-J)*d, (1+J)*d], capped at Max, and never goes negative.
func TestDelayJitterBounds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		p    Policy
	}{
		{"exponential", Policy{Backoff: Exponential, Initial: 100 * time.Millisecond, Max: time.Minute, Jitter: 0.1}},
		{"linear", Policy{Backoff: Linear, Initial: time.Second, Max: time.Minute, Jitter: 0.3}},
		{"fixed", Policy{Backoff: Fixed, Initial: 7 * time.Second, Jitter: 1}},
		{"uncapped exponential", Policy{Backoff: Exponential, Initial: time.Second, Jitter: 0.25}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			noJitter := tt.p
			noJitter.Jitter = 0
			for _, attempt := range []int{1, 2, 3, 10, 40, 62, 63, 64, 1 << 20, math.MaxInt} {
				d := noJitter.Delay(attempt, nil)
				lo := time.Duration(float64(d) * (1 - tt.p.Jitter))
				hi := float64(d) * (1 + tt.p.Jitter)
				if tt.p.Max > 0 {
					hi = min(hi, float64(tt.p.Max))
				}
				prev := time.Duration(-1)
				for i := range 256 {
					r := float64(i) / 256
					got := tt.p.Delay(attempt, constRnd(r))
					require.GreaterOrEqual(t, got, time.Duration(0), "attempt %d rnd %v", attempt, r)
					// One nanosecond of slack for float rounding.
					require.GreaterOrEqual(t, got, lo-1, "attempt %d rnd %v", attempt, r)
					require.LessOrEqual(t, float64(got), hi+1, "attempt %d rnd %v", attempt, r)
					if tt.p.Max > 0 {
						require.LessOrEqual(t, got, tt.p.Max, "attempt %d rnd %v", attempt, r)
					}
					require.GreaterOrEqual(t, got, prev, "delay must grow with rnd")
					prev = got
				}
			}
		})
	}
}

// TestDelayMonotonic checks that, without jitter, a later attempt never
// waits less than an earlier one, up to and past overflow.
func TestDelayMonotonic(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		p    Policy
	}{
		{"exponential", Policy{Backoff: Exponential, Initial: 3 * time.Millisecond}},
		{"exponential capped", Policy{Backoff: Exponential, Initial: 3 * time.Millisecond, Max: time.Hour}},
		{"linear", Policy{Backoff: Linear, Initial: time.Hour}},
		{"fixed", Policy{Backoff: Fixed, Initial: time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			prev := time.Duration(0)
			for attempt := 1; attempt <= 200; attempt++ {
				got := tt.p.Delay(attempt, nil)
				require.GreaterOrEqual(t, got, prev, "attempt %d", attempt)
				prev = got
			}
		})
	}
}

func TestExhausted(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		maxAttempts int
		attempt     int
		want        bool
	}{
		{"one attempt allowed, first done", 1, 1, true},
		{"three allowed, first done", 3, 1, false},
		{"three allowed, second done", 3, 2, false},
		{"three allowed, third done", 3, 3, true},
		{"three allowed, beyond", 3, 4, true},
		{"zero max allows one", 0, 1, true},
		{"negative max allows one", -2, 1, true},
		{"attempt zero is not exhausted", 3, 0, false},
		{"huge max", math.MaxInt, math.MaxInt - 1, false},
		{"huge max reached", math.MaxInt, math.MaxInt, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, Policy{MaxAttempts: tt.maxAttempts}.Exhausted(tt.attempt))
		})
	}
}
