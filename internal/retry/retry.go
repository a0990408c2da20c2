// Package retry computes how long a failed step waits before its next
// attempt and whether it has attempts left.
//
// The package is pure: randomness comes from the caller, so delays are
// reproducible in tests.
package retry

import (
	"math"
	"time"
)

// Backoff modes.
const (
	// Exponential doubles the delay after each failed attempt.
	Exponential = "exponential"
	// Fixed waits the same delay after every failed attempt.
	Fixed = "fixed"
	// Linear grows the delay by Initial after each failed attempt.
	Linear = "linear"
)

// Policy is a resolved retry policy (defaults already applied by the caller).
type Policy struct {
	// MaxAttempts counts the first attempt; 1 means never retry. Values
	// below 1 are treated as 1.
	MaxAttempts int
	// Backoff is Exponential, Fixed or Linear; any other value, including
	// "", is treated as Exponential.
	Backoff string
	// Initial is the first delay. Max caps every delay when positive.
	Initial, Max time.Duration
	// Jitter is the fraction, 0 to 1, by which a delay is randomly
	// shortened or lengthened. Values outside are clamped.
	Jitter float64
}

// Delay returns the wait before the attempt that follows failed attempt
// number attempt (1-based; values below 1 are treated as 1):
//
//	exponential  Initial * 2^(attempt-1)
//	linear       Initial * attempt
//	fixed        Initial
//
// The result is capped at Max when Max > 0; a product that would overflow
// saturates (to Max, or to the largest Duration when there is no cap), so
// huge attempt numbers are safe. Then, when Jitter > 0, the delay is
// multiplied by 1-Jitter+2*Jitter*rnd(), a factor uniform in
// [1-Jitter, 1+Jitter) for rnd uniform in [0,1), and capped at Max again.
// rnd's result is clamped to [0,1]; a nil rnd means no jitter. The result
// is never negative.
func (p Policy) Delay(attempt int, rnd func() float64) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	initial := max(p.Initial, 0)
	var d time.Duration
	switch p.Backoff {
	case Fixed:
		d = initial
	case Linear:
		d = mulSat(initial, int64(attempt))
	default:
		if attempt-1 >= 63 {
			d = mulSat(initial, math.MaxInt64) // 0 stays 0, anything else saturates
		} else {
			d = mulSat(initial, int64(1)<<(attempt-1))
		}
	}
	d = p.capped(d)

	j := p.Jitter
	if !(j > 0) || rnd == nil { // also catches NaN
		return d
	}
	j = min(j, 1)
	r := rnd()
	if !(r > 0) { // also catches NaN
		r = 0
	}
	r = min(r, 1)
	f := float64(d) * (1 - j + 2*j*r)
	// float64(math.MaxInt64) rounds up to 2^63, so >= catches every value
	// that does not fit.
	if f >= float64(math.MaxInt64) {
		d = math.MaxInt64
	} else {
		d = time.Duration(f)
	}
	return max(p.capped(d), 0)
}

// capped returns d capped at p.Max when p.Max is positive.
func (p Policy) capped(d time.Duration) time.Duration {
	if p.Max > 0 && d > p.Max {
		return p.Max
	}
	return d
}

// mulSat returns d*n for d, n >= 0, saturating at the largest Duration
// instead of overflowing.
func mulSat(d time.Duration, n int64) time.Duration {
	if d == 0 || n == 0 {
		return 0
	}
	if int64(d) > math.MaxInt64/n {
		return math.MaxInt64
	}
	return d * time.Duration(n)
}

// Exhausted reports whether attempt (1-based, just finished) was the last one
// allowed. A MaxAttempts below 1 allows a single attempt.
func (p Policy) Exhausted(attempt int) bool {
	return attempt >= max(p.MaxAttempts, 1)
}
