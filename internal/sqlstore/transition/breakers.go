package transition

import (
	"fmt"
	"sort"

	"github.com/weftrun/weft/internal/sqlstore/claim"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// The circuit breakers of steps (see store.Breakers): counting in the
// transaction that records an outcome (breakeroutcomes.go), the claim's
// hold, its bound under the threshold and its one probe (breakerclaim.go),
// and, in this file, the operator's view and reset.
//
// Nothing of this runs for a step without a breaker: its outcome's fenced
// update returns breaker_key = '' and no statement follows; the claim adds
// a predicate only while some breaker is open or has counted failures.
//
// Exactness of the threshold: once a closed breaker counted a failure, a
// claim takes a step under it only while the failures counted, plus the
// steps under it still running (whose failures may yet count), plus those
// it takes, stay below the threshold (waryRoom). So the breaker opens at
// exactly its threshold and no more steps fail on the way than it allows;
// only steps already running when the first failure was counted may add
// to it. The claim reads the count under the breaker's row lock.
//
// Exactness of the probe: the claim takes it with one conditional UPDATE
// of the breaker's row (open and cooled down, or half-open with a probe
// that no longer runs, one cooldown after it was claimed), in the claim's
// transaction. On PostgreSQL a second claim skips that row while the first
// holds it, and once the first commits finds it half-open with a fresh
// probe_at: either way it takes no probe. On SQLite the single writer does
// the same.

// breakerColumns returns the steps columns of a step's breaker.
func breakerColumns(b *store.BreakerSpec) (key string, n int, cooldown int64) {
	if b == nil {
		return "", 0, 0
	}
	return b.Key, b.Failures, b.Cooldown.Microseconds()
}

// breakerKind classifies an outcome recorded as to.
func breakerKind(o store.Outcome, to state.Step) claim.HitKind {
	switch {
	case to == state.StepCompleted:
		return claim.HitSuccess
	case to == state.StepFailed:
		return claim.HitFailure
	case (to == state.StepWaiting || to == state.StepReady) && !o.Snooze && o.Child == nil:
		return claim.HitFailure
	}
	return claim.HitNone
}

// BreakerHit records, for flushBreakers, the outcome o of step StepID
// recorded as to, when its fenced update returned a breaker (b.key, n and
// cooldown; no key: the step has none).
func (t *outcomeTx) breakerHit(b claim.BreakerHit, stepID, taskID int64, name string, o store.Outcome, to state.Step) {
	if b.Key == "" {
		return
	}
	b.StepID, b.TaskID, b.Name, b.Attempt, b.Kind = stepID, taskID, name, o.Fence.Attempt, breakerKind(o, to)
	if t.Breakers.Lapsed {
		b.Kind = claim.HitNone
	}
	t.Breakers.Hits = append(t.Breakers.Hits, b)
}

// flushBreakers applies the outcomes a transaction recorded to their
// breakers and moves the policy version if a breaker changed state. It
// runs last, before the audit: every transaction takes step and task rows,
// then breaker rows in key order, then the policy version row, so that
// none waits for another in a cycle. Claims never wait for a breaker row
// (takeProbe skips a locked one).
func (t *outcomeTx) flushBreakers() error {
	w := &t.Breakers
	if len(w.Hits) > 0 {
		// By key, and in step order under one key, as the outcomes are.
		sort.SliceStable(w.Hits, func(a, b int) bool {
			if w.Hits[a].Key != w.Hits[b].Key {
				return w.Hits[a].Key < w.Hits[b].Key
			}
			return w.Hits[a].StepID < w.Hits[b].StepID
		})
		hits := w.Hits
		w.Hits = nil
		if err := t.breakerOutcomes(hits); err != nil {
			return err
		}
	}
	if w.Bump {
		w.Bump = false
		return t.MovePolicyVersion()
	}
	return nil
}

// breakerOutcomes applies recorded outcomes to their breakers, in order:
// a failure counts (and opens the breaker at its threshold, or reopens it
// when it is the probe's), a success resets the count and closes the
// breaker, a probe that gave its claim back lets the next claim probe.
func (t *outcomeTx) breakerOutcomes(hits []claim.BreakerHit) error {
	if len(hits) == 0 {
		return nil
	}
	// What the successes need to know, as the outcomes' statements read
	// it: most find their breaker closed with no failures and write
	// nothing. The transaction's own changes follow in known.
	known := map[string]claim.KnownBreaker{}
	for _, h := range hits {
		if _, seen := known[h.Key]; !seen {
			known[h.Key] = h.Row
		}
	}
	for _, h := range hits {
		var err error
		switch h.Kind {
		case claim.HitFailure:
			err = t.breakerFailed(h, known)
		case claim.HitSuccess:
			err = t.breakerSucceeded(h, known)
		default:
			err = claim.BreakerProbeReturned(t.SQL(), &t.Breakers, h)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// breakerFailed counts a failed attempt.
func (t *outcomeTx) breakerFailed(h claim.BreakerHit, known map[string]claim.KnownBreaker) error {
	var st string
	var failures int
	var probe int64
	err := t.QueryRow(`INSERT INTO breakers (breaker_key, state, failures, threshold, cooldown, updated_at) VALUES (?, 'closed', 1, ?, ?, ?)
		ON CONFLICT (breaker_key) DO UPDATE SET failures = breakers.failures + 1, threshold = excluded.threshold,
		cooldown = excluded.cooldown, updated_at = excluded.updated_at
		RETURNING state, failures, COALESCE(probe_step_id, 0)`, h.Key, h.N, h.Cooldown, t.Now).Scan(&st, &failures, &probe)
	if err != nil {
		return fmt.Errorf("count failure of breaker %s: %w", h.Key, err)
	}
	known[h.Key] = claim.KnownBreaker{State: st, Failures: failures}
	if st == store.BreakerClosed && failures == 1 {
		// Its first failure: every claim reads the breaker again and
		// holds its steps to the room left under the threshold.
		t.Breakers.Bump = true
	}
	var reason string
	switch {
	case st == store.BreakerClosed && failures >= h.N:
		reason = fmt.Sprintf("breaker %s opened after %d consecutive failures", h.Key, failures)
	case st == store.BreakerHalfOpen && probe == h.StepID:
		reason = fmt.Sprintf("breaker %s reopened: its probe failed", h.Key)
	default:
		return nil // counted; the breaker stays as it is
	}
	// The row is locked by the upsert: this transaction decides.
	if _, err := t.Exec(`UPDATE breakers SET state = 'open', opened_at = ?, probe_at = NULL, probe_step_id = NULL WHERE breaker_key = ?`,
		t.Now, h.Key); err != nil {
		return fmt.Errorf("open breaker %s: %w", h.Key, err)
	}
	known[h.Key] = claim.KnownBreaker{State: store.BreakerOpen, Failures: failures}
	t.Audit(h.TaskID, h.Name, claim.BreakerState(st), claim.BreakerState(store.BreakerOpen), h.Attempt, reason)
	t.Breakers.Bump = true
	return nil
}

// breakerSucceeded resets the count and closes the breaker.
func (t *outcomeTx) breakerSucceeded(h claim.BreakerHit, known map[string]claim.KnownBreaker) error {
	k := known[h.Key]
	switch {
	case k.State != store.BreakerClosed:
		res, err := t.Exec(`UPDATE breakers SET state = 'closed', failures = 0, opened_at = NULL, probe_at = NULL, probe_step_id = NULL, updated_at = ?
			WHERE breaker_key = ? AND state <> 'closed'`, t.Now, h.Key)
		if err != nil {
			return fmt.Errorf("close breaker %s: %w", h.Key, err)
		}
		known[h.Key] = claim.KnownBreaker{State: store.BreakerClosed}
		if n, _ := res.RowsAffected(); n == 0 {
			return nil // closed meanwhile
		}
		reason := fmt.Sprintf("breaker %s closed: the step succeeded", h.Key)
		t.Audit(h.TaskID, h.Name, claim.BreakerState(k.State), claim.BreakerState(store.BreakerClosed), h.Attempt, reason)
		t.Readied++ // the held steps may run: wake the engines
		t.Breakers.Bump = true
		return nil
	case k.Failures > 0:
		if _, err := t.Exec(`UPDATE breakers SET failures = 0, updated_at = ? WHERE breaker_key = ? AND state = 'closed'`, t.Now, h.Key); err != nil {
			return fmt.Errorf("reset breaker %s: %w", h.Key, err)
		}
		known[h.Key] = claim.KnownBreaker{State: store.BreakerClosed}
		t.Breakers.Bump = true // its steps are claimed freely again
	}
	return nil
}
