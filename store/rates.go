package store

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Rate limits: at most Limit claims per Per, with bursts of up to Limit,
// counted by a token bucket held in the database (see
// internal/sqlstore/rates.go). A step that finds no token is not claimed:
// it waits, without using an attempt, until a token will exist.

// Bounds of a rate: a token bucket holds Limit tokens and refills Limit of
// them per Per, in whole microseconds; the bounds keep Limit × Per within
// 64 bits.
const (
	MaxRateLimit = 1_000_000
	MinRatePer   = time.Millisecond
	MaxRatePer   = 24 * time.Hour
)

// Rate is a rate limit: at most Limit claims per Per, in bursts of up to
// Limit. The zero Rate is none. In JSON and flags it is "LIMIT/PER" where
// PER is s, m, h or a duration ("50/s", "100/m", "5/10s"), or "off".
type Rate struct {
	Limit int
	Per   time.Duration
}

// IsZero reports whether r is no rate.
func (r Rate) IsZero() bool { return r.Limit == 0 }

// Validate checks a rate's bounds; the zero Rate is valid (none).
func (r Rate) Validate() error {
	if r.IsZero() && r.Per == 0 {
		return nil
	}
	switch {
	case r.Limit < 1 || r.Limit > MaxRateLimit:
		return Invalidf("rate", "the limit must be from 1 to %d, got %d", MaxRateLimit, r.Limit)
	case r.Per < MinRatePer || r.Per > MaxRatePer:
		return Invalidf("rate", "the period must be from %s to %s, got %s", MinRatePer, MaxRatePer, r.Per)
	case r.Per%time.Microsecond != 0:
		return Invalidf("rate", "the period must be whole microseconds, got %s", r.Per)
	}
	return nil
}

// String returns "LIMIT/PER" ("50/s", "100/m", "5/10s") or "off".
func (r Rate) String() string {
	if r.IsZero() {
		return "off"
	}
	per := r.Per.String()
	switch r.Per {
	case time.Second:
		per = "s"
	case time.Minute:
		per = "m"
	case time.Hour:
		per = "h"
	default:
		// "1m30s" as is; "2m0s" as "2m", "1h0m0s" as "1h".
		if p, ok := strings.CutSuffix(per, "m0s"); ok {
			per = p + "m"
		}
		if p, ok := strings.CutSuffix(per, "h0m"); ok {
			per = p + "h"
		}
	}
	return strconv.Itoa(r.Limit) + "/" + per
}

// ParseRate reads "LIMIT/PER" (PER: s, m, h or a Go duration such as 10s
// or 500ms), or "0" or "off" for none, and checks its bounds.
func ParseRate(s string) (Rate, error) {
	s = strings.TrimSpace(s)
	if s == "0" || s == "off" {
		return Rate{}, nil
	}
	n, per, ok := strings.Cut(s, "/")
	if !ok {
		return Rate{}, Invalidf("rate", "%q: want LIMIT/PER such as 50/s, 100/m, 1000/h or 5/10s, or off", s)
	}
	limit, err := strconv.Atoi(n)
	if err != nil {
		return Rate{}, Invalidf("rate", "%q: the limit %q is not a whole number", s, n)
	}
	var d time.Duration
	switch per {
	case "s":
		d = time.Second
	case "m":
		d = time.Minute
	case "h":
		d = time.Hour
	default:
		if d, err = time.ParseDuration(per); err != nil {
			return Rate{}, Invalidf("rate", "%q: the period %q is not s, m, h or a duration such as 10s", s, per)
		}
	}
	r := Rate{Limit: limit, Per: d}
	if err := r.Validate(); err != nil {
		return Rate{}, fmt.Errorf("%w (in %q)", err, s)
	}
	return r, nil
}

// MarshalText writes r as String does.
func (r Rate) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// UnmarshalText reads r as ParseRate does.
func (r *Rate) UnmarshalText(b []byte) error {
	v, err := ParseRate(string(b))
	if err != nil {
		return err
	}
	*r = v
	return nil
}

// RateUsage is one token bucket a rate limit uses, as it stands now.
type RateUsage struct {
	// Key names the bucket: "ns:NAMESPACE" for a namespace's rate,
	// "step:NS/WORKFLOW/STEP" for a step's, followed by "=VALUE" for a
	// keyed one.
	Key  string
	Rate Rate
	// Tokens is how many claims the bucket allows now, besides those of
	// the tokens engines hold reserved (rates of 1,000 a period or more).
	Tokens float64
	// DeferredUntil is the latest time a step waiting for a token of this
	// bucket was deferred to, when it is still to come.
	DeferredUntil *time.Time
}

// RateDeferral is what one claim deferred for want of tokens of one
// bucket: Steps steps, the last of them until Until.
type RateDeferral struct {
	Key   string
	Steps int
	Until time.Time
}
