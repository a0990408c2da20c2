package workflow

import "time"

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

var tplRetentionFields = map[string]tplFieldDecoder[Retention]{
	"completed": tplField((*templateDecoder).duration, func(r *Retention) *Duration { return &r.Completed }),
	"failed":    tplField((*templateDecoder).duration, func(r *Retention) *Duration { return &r.Failed }),
	"cancelled": tplField((*templateDecoder).duration, func(r *Retention) *Duration { return &r.Cancelled }),
	"expired":   tplField((*templateDecoder).duration, func(r *Retention) *Duration { return &r.Expired }),
}
