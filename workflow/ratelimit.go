package workflow

import (
	"time"

	"github.com/weftrun/weft/internal/expr"
	"github.com/weftrun/weft/store"
)

// RateLimit bounds how often a step (of every task of its workflow) is
// claimed, across every engine and remote worker: at most Limit claims
// per Per, in bursts of up to Limit, or with Key at most that for each
// value of Key. A step that finds no token is not failed: it waits,
// without using an attempt, until a token will exist.
type RateLimit struct {
	// Limit is how many claims Per allows, from 1 to store.MaxRateLimit.
	Limit int `json:"limit"`
	// Per is the period, from a millisecond to a day.
	Per Duration `json:"per"`
	// Key, if set, is a CEL expression over the task input (the variable
	// input) whose value (a string, number or boolean) divides the rate:
	// each value has a bucket of its own, say one per customer with
	// input.customer. A task whose input the key cannot be computed from
	// is refused at submission.
	Key string `json:"key,omitempty"`

	line        int // lines in the source template, for errors
	keyLine     int
	perReported bool // per did not decode, and the decoder said so
	perGiven    bool // the template gave per (0s is then a bad value, not a missing one)
}

// Rate returns the limit and period as a store.Rate.
func (r *RateLimit) Rate() store.Rate {
	return store.Rate{Limit: r.Limit, Per: time.Duration(r.Per)}
}

// WithRateLimit bounds how often the step is claimed across every engine
// (see RateLimit): at most limit per period, or with key (a CEL expression
// over the task input) at most that per value of key.
func WithRateLimit(limit int, per time.Duration, key string) StepOption {
	return func(s *Step) { s.RateLimit = &RateLimit{Limit: limit, Per: Duration(per), Key: key} }
}

// validate checks a rate limit; nil is none. line is where its owner is,
// for a limit built in Go.
func (r *RateLimit) validate(step string, line int, add addFunc) {
	if r == nil {
		return
	}
	if r.line > 0 {
		line = r.line
	}
	if r.Limit < 1 || r.Limit > store.MaxRateLimit {
		add(step, line, "rate_limit.limit", "must be from 1 to %d, got %d", store.MaxRateLimit, r.Limit)
	}
	switch per := time.Duration(r.Per); {
	case r.perReported:
	case per == 0 && !r.perGiven:
		add(step, line, "rate_limit.per", "is required: a duration such as 1s or 1m")
	case per < store.MinRatePer || per > store.MaxRatePer:
		add(step, line, "rate_limit.per", "must be from %s to %s, got %s", store.MinRatePer, store.MaxRatePer, per)
	case per%time.Microsecond != 0:
		add(step, line, "rate_limit.per", "must be whole microseconds, got %s", per)
	}
	if r.Key != "" {
		if r.keyLine > 0 {
			line = r.keyLine
		}
		if _, err := expr.CompileKey(r.Key); err != nil {
			add(step, line, "rate_limit.key", "%v", err)
		}
	}
}
