package model

import (
	"context"
	"time"
)

// Shrink returns a shorter sequence for which fails still reports true,
// by removing chunks of ops (halves, then quarters, … then single ops:
// delta debugging's complement step) until no single op can be removed,
// or the budget runs out (it then returns the shortest failing sequence
// found). fails is called with candidate sequences; ops itself must fail.
func Shrink(ctx context.Context, ops []Op, budget time.Duration, fails func(context.Context, []Op) (bool, error)) ([]Op, error) {
	deadline := time.Now().Add(budget)
	cur := append([]Op(nil), ops...)
	chunk := len(cur) / 2
	if chunk < 1 {
		chunk = 1
	}
	for {
		removed := false
		for start := 0; start < len(cur); {
			if ctx.Err() != nil || (budget > 0 && time.Now().After(deadline)) {
				return cur, ctx.Err()
			}
			end := min(start+chunk, len(cur))
			cand := append(append([]Op(nil), cur[:start]...), cur[end:]...)
			if len(cand) == 0 {
				start = end
				continue
			}
			ok, err := fails(ctx, cand)
			if err != nil {
				return cur, err
			}
			if ok {
				cur = cand
				removed = true
				continue // the next chunk is at start now
			}
			start = end
		}
		if chunk == 1 && !removed {
			return cur, nil
		}
		if chunk > 1 {
			chunk /= 2
		}
	}
}
