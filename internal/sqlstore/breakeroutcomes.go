package sqlstore

import (
	"fmt"
	"sort"

	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// This file records outcomes under circuit breakers (see breakers.go):
// what an outcome's statement returns of its step's breaker, and the
// counts and state changes written last in the transaction.

// breakerKind classifies an outcome recorded as to.
func breakerKind(o store.Outcome, to state.Step) hitKind {
	switch {
	case to == state.StepCompleted:
		return hitSuccess
	case to == state.StepFailed:
		return hitFailure
	case (to == state.StepWaiting || to == state.StepReady) && !o.Snooze && o.Child == nil:
		return hitFailure
	}
	return hitNone
}

// breakerHit records, for flushBreakers, the outcome o of step StepID
// recorded as to, when its fenced update returned a breaker (b.key, n and
// cooldown; no key: the step has none).
func (t *outcomeTx) breakerHit(b breakerHit, stepID, taskID int64, name string, o store.Outcome, to state.Step) {
	if b.key == "" {
		return
	}
	b.stepID, b.taskID, b.name, b.attempt, b.kind = stepID, taskID, name, o.Fence.Attempt, breakerKind(o, to)
	if t.breakers.lapsed {
		b.kind = hitNone
	}
	t.breakers.hits = append(t.breakers.hits, b)
}

// flushBreakers applies the outcomes a transaction recorded to their
// breakers and moves the policy version if a breaker changed state. It
// runs last, before the audit: every transaction takes step and task rows,
// then breaker rows in key order, then the policy version row, so that
// none waits for another in a cycle. Claims never wait for a breaker row
// (takeProbe skips a locked one).
func (t *outcomeTx) flushBreakers() error {
	w := &t.breakers
	if len(w.hits) > 0 {
		// By key, and in step order under one key, as the outcomes are.
		sort.SliceStable(w.hits, func(a, b int) bool {
			if w.hits[a].key != w.hits[b].key {
				return w.hits[a].key < w.hits[b].key
			}
			return w.hits[a].stepID < w.hits[b].stepID
		})
		hits := w.hits
		w.hits = nil
		if err := t.breakerOutcomes(hits); err != nil {
			return err
		}
	}
	if w.bump {
		w.bump = false
		return t.movePolicyVersion()
	}
	return nil
}

// breakerOutcomes applies recorded outcomes to their breakers, in order:
// a failure counts (and opens the breaker at its threshold, or reopens it
// when it is the probe's), a success resets the count and closes the
// breaker, a probe that gave its claim back lets the next claim probe.
func (t *outcomeTx) breakerOutcomes(hits []breakerHit) error {
	if len(hits) == 0 {
		return nil
	}
	// What the successes need to know, as the outcomes' statements read
	// it: most find their breaker closed with no failures and write
	// nothing. The transaction's own changes follow in known.
	known := map[string]knownBreaker{}
	for _, h := range hits {
		if _, seen := known[h.key]; !seen {
			known[h.key] = h.row
		}
	}
	for _, h := range hits {
		var err error
		switch h.kind {
		case hitFailure:
			err = t.breakerFailed(h, known)
		case hitSuccess:
			err = t.breakerSucceeded(h, known)
		default:
			err = breakerProbeReturned(&t.Tx, &t.breakers, h)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// breakerFailed counts a failed attempt.
func (t *outcomeTx) breakerFailed(h breakerHit, known map[string]knownBreaker) error {
	var st string
	var failures int
	var probe int64
	err := t.QueryRow(`INSERT INTO breakers (breaker_key, state, failures, threshold, cooldown, updated_at) VALUES (?, 'closed', 1, ?, ?, ?)
		ON CONFLICT (breaker_key) DO UPDATE SET failures = breakers.failures + 1, threshold = excluded.threshold,
		cooldown = excluded.cooldown, updated_at = excluded.updated_at
		RETURNING state, failures, COALESCE(probe_step_id, 0)`, h.key, h.n, h.cooldown, t.Now).Scan(&st, &failures, &probe)
	if err != nil {
		return fmt.Errorf("count failure of breaker %s: %w", h.key, err)
	}
	known[h.key] = knownBreaker{state: st, failures: failures}
	if st == store.BreakerClosed && failures == 1 {
		// Its first failure: every claim reads the breaker again and
		// holds its steps to the room left under the threshold.
		t.breakers.bump = true
	}
	var reason string
	switch {
	case st == store.BreakerClosed && failures >= h.n:
		reason = fmt.Sprintf("breaker %s opened after %d consecutive failures", h.key, failures)
	case st == store.BreakerHalfOpen && probe == h.stepID:
		reason = fmt.Sprintf("breaker %s reopened: its probe failed", h.key)
	default:
		return nil // counted; the breaker stays as it is
	}
	// The row is locked by the upsert: this transaction decides.
	if _, err := t.Exec(`UPDATE breakers SET state = 'open', opened_at = ?, probe_at = NULL, probe_step_id = NULL WHERE breaker_key = ?`,
		t.Now, h.key); err != nil {
		return fmt.Errorf("open breaker %s: %w", h.key, err)
	}
	known[h.key] = knownBreaker{state: store.BreakerOpen, failures: failures}
	t.Audit(h.taskID, h.name, breakerState(st), breakerState(store.BreakerOpen), h.attempt, reason)
	t.breakers.bump = true
	return nil
}

// breakerSucceeded resets the count and closes the breaker.
func (t *outcomeTx) breakerSucceeded(h breakerHit, known map[string]knownBreaker) error {
	k := known[h.key]
	switch {
	case k.state != store.BreakerClosed:
		res, err := t.Exec(`UPDATE breakers SET state = 'closed', failures = 0, opened_at = NULL, probe_at = NULL, probe_step_id = NULL, updated_at = ?
			WHERE breaker_key = ? AND state <> 'closed'`, t.Now, h.key)
		if err != nil {
			return fmt.Errorf("close breaker %s: %w", h.key, err)
		}
		known[h.key] = knownBreaker{state: store.BreakerClosed}
		if n, _ := res.RowsAffected(); n == 0 {
			return nil // closed meanwhile
		}
		reason := fmt.Sprintf("breaker %s closed: the step succeeded", h.key)
		t.Audit(h.taskID, h.name, breakerState(k.state), breakerState(store.BreakerClosed), h.attempt, reason)
		t.Readied++ // the held steps may run: wake the engines
		t.breakers.bump = true
		return nil
	case k.failures > 0:
		if _, err := t.Exec(`UPDATE breakers SET failures = 0, updated_at = ? WHERE breaker_key = ? AND state = 'closed'`, t.Now, h.key); err != nil {
			return fmt.Errorf("reset breaker %s: %w", h.key, err)
		}
		known[h.key] = knownBreaker{state: store.BreakerClosed}
		t.breakers.bump = true // its steps are claimed freely again
	}
	return nil
}
