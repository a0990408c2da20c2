// Package jitter spreads the waits of loops that many engines run against
// one database, so that they do not fall into step.
package jitter

import (
	"math/rand/v2"
	"time"
)

// Of returns d give or take a fifth, uniformly.
func Of(d time.Duration) time.Duration {
	return d - d/5 + time.Duration(rand.Int64N(int64(d)/5*2+1))
}
