package workflow

import (
	"fmt"
	"time"
)

// MinRetention is the shortest retention: one that rounds to nothing in
// the store (which keeps microseconds) would delete each task as it ends.
const MinRetention = time.Second

// CheckRetention checks a retention's duration: 0 (none) or at least
// MinRetention.
func CheckRetention(keep time.Duration) error {
	if keep < 0 || keep > 0 && keep < MinRetention {
		return fmt.Errorf("must be at least %s, got %s", MinRetention, keep)
	}
	return nil
}

// Retention says how long a workflow's finished tasks are kept, per final
// state; zero keeps them forever. The maintenance leader deletes older
// ones (with their steps, audit trail and signals) in small batches. It
// takes precedence over a retention set for the workflow's namespace.
//
// In YAML:
//
//	retention: { completed: 7d, failed: 30d, cancelled: 1d }
type Retention struct {
	Completed Duration `json:"completed,omitempty"`
	Failed    Duration `json:"failed,omitempty"`
	Cancelled Duration `json:"cancelled,omitempty"`
	Expired   Duration `json:"expired,omitempty"`
}

// ByState returns the retention of each final state that has one, keyed
// by state name.
func (r *Retention) ByState() map[string]time.Duration {
	out := map[string]time.Duration{}
	if r == nil {
		return out
	}
	for name, d := range map[string]Duration{"completed": r.Completed, "failed": r.Failed, "cancelled": r.Cancelled, "expired": r.Expired} {
		if d > 0 {
			out[name] = time.Duration(d)
		}
	}
	return out
}

// validate adds a problem for each retention too short to keep anything.
func (r *Retention) validate(add addFunc) {
	if r == nil {
		return
	}
	for _, f := range []struct {
		name string
		d    Duration
	}{{"completed", r.Completed}, {"failed", r.Failed}, {"cancelled", r.Cancelled}, {"expired", r.Expired}} {
		if err := CheckRetention(time.Duration(f.d)); err != nil {
			add("", 0, "retention."+f.name, "%v (leave it out to keep the tasks)", err)
		}
	}
}

var tplRetentionFields = map[string]tplFieldDecoder[Retention]{
	"completed": tplField((*templateDecoder).duration, func(r *Retention) *Duration { return &r.Completed }),
	"failed":    tplField((*templateDecoder).duration, func(r *Retention) *Duration { return &r.Failed }),
	"cancelled": tplField((*templateDecoder).duration, func(r *Retention) *Duration { return &r.Cancelled }),
	"expired":   tplField((*templateDecoder).duration, func(r *Retention) *Duration { return &r.Expired }),
}
