package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// This file holds the circuit breakers of steps (see store.Breakers):
// counting in the transaction that records an outcome, the claim's hold
// and its one probe, and the operator's view and reset.
//
// Nothing of this runs for a step without a breaker: its outcome's fenced
// update returns breaker_key = '' and no statement follows; the claim adds
// a predicate only while some breaker is open.
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
// transaction. On PostgreSQL a second claim waits for that row and, when
// the first commits, finds the row half-open with a fresh probe_at: it
// takes no probe. On SQLite the single writer does the same.

// breakerColumns returns the steps columns of a step's breaker.
func breakerColumns(b *store.BreakerSpec) (key string, n int, cooldown int64) {
	if b == nil {
		return "", 0, 0
	}
	return b.Key, b.Failures, b.Cooldown.Microseconds()
}

// breakerHit is an outcome recorded for a step with a breaker, with the
// breaker's row as the outcome's statement saw it (breakerReturning).
type breakerHit struct {
	stepID, taskID int64
	name           string
	attempt        int
	key            string
	n              int
	cooldown       int64
	kind           hitKind
	row            knownBreaker
}

// breakerReturning is what an outcome's fenced update returns of the
// step's breaker (breakerHit.scan): its key, threshold and cooldown, and
// the state and failures of its row, read in the same statement; none for
// a step without a breaker.
const breakerReturning = `breaker_key, breaker_n, breaker_cooldown,
	CASE WHEN breaker_key <> '' THEN (SELECT b.state FROM breakers b WHERE b.breaker_key = steps.breaker_key) END,
	CASE WHEN breaker_key <> '' THEN (SELECT b.failures FROM breakers b WHERE b.breaker_key = steps.breaker_key) END`

// dest returns where to scan breakerReturning; done fills the row from
// what was scanned (no row: closed, no failures).
func (b *breakerHit) dest() (dest []any, done func()) {
	var st sql.NullString
	var failures sql.NullInt64
	return []any{&b.key, &b.n, &b.cooldown, &st, &failures}, func() {
		b.row = knownBreaker{state: store.BreakerClosed}
		if st.Valid {
			b.row = knownBreaker{state: st.String, failures: int(failures.Int64)}
		}
	}
}

// hitKind is what an outcome means to a breaker.
type hitKind int

const (
	hitNone    hitKind = iota // snoozed, released, skipped, waiting for a child, lease lapsed
	hitSuccess                // completed
	hitFailure                // failed, or to be retried
)

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

// breakerHit records, for flushBreakers, the outcome o of step stepID
// recorded as to, when its fenced update returned a breaker (b.key, n and
// cooldown; no key: the step has none).
func (t *txn) breakerHit(b breakerHit, stepID, taskID int64, name string, o store.Outcome, to state.Step) {
	if b.key == "" {
		return
	}
	b.stepID, b.taskID, b.name, b.attempt, b.kind = stepID, taskID, name, o.Fence.Attempt, breakerKind(o, to)
	if t.breakers.lapsed {
		b.kind = hitNone
	}
	t.breakers.hits = append(t.breakers.hits, b)
}

// breakerWork is what a transaction leaves to do to breakers before it
// commits.
type breakerWork struct {
	hits []breakerHit
	// bump: the policy version moves once this transaction commits, so
	// that every claim reads the breakers again (the version row is
	// written last, see flushBreakers).
	bump bool
	// lapsed: the outcomes recorded are of leases that lapsed (Reap). The
	// engine died, not the step: they do not count, and a probe among them
	// gives its place back.
	lapsed bool
}

// failed reports whether the transaction recorded a failure under a
// breaker.
func (w *breakerWork) failed() bool {
	for _, h := range w.hits {
		if h.kind == hitFailure {
			return true
		}
	}
	return false
}

// flushBreakers applies the outcomes a transaction recorded to their
// breakers and moves the policy version if a breaker changed state. It
// runs last, before the audit: every transaction takes step and task rows,
// then breaker rows in key order, then the policy version row, so that
// none waits for another in a cycle. Claims never wait for a breaker row
// (takeProbe skips a locked one).
func (t *txn) flushBreakers() error {
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

// knownBreaker is what an outcome batch knows of a breaker's row.
type knownBreaker struct {
	state    string
	failures int
}

// breakerOutcomes applies recorded outcomes to their breakers, in order:
// a failure counts (and opens the breaker at its threshold, or reopens it
// when it is the probe's), a success resets the count and closes the
// breaker, a probe that gave its claim back lets the next claim probe.
func (t *txn) breakerOutcomes(hits []breakerHit) error {
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
			err = t.breakerProbeReturned(h)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// breakerFailed counts a failed attempt.
func (t *txn) breakerFailed(h breakerHit, known map[string]knownBreaker) error {
	var st string
	var failures int
	var probe int64
	err := t.queryRow(`INSERT INTO breakers (breaker_key, state, failures, threshold, cooldown, updated_at) VALUES (?, 'closed', 1, ?, ?, ?)
		ON CONFLICT (breaker_key) DO UPDATE SET failures = breakers.failures + 1, threshold = excluded.threshold,
		cooldown = excluded.cooldown, updated_at = excluded.updated_at
		RETURNING state, failures, COALESCE(probe_step_id, 0)`, h.key, h.n, h.cooldown, t.now).Scan(&st, &failures, &probe)
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
	if _, err := t.exec(`UPDATE breakers SET state = 'open', opened_at = ?, probe_at = NULL, probe_step_id = NULL WHERE breaker_key = ?`,
		t.now, h.key); err != nil {
		return fmt.Errorf("open breaker %s: %w", h.key, err)
	}
	known[h.key] = knownBreaker{state: store.BreakerOpen, failures: failures}
	t.audit(h.taskID, h.name, breakerState(st), breakerState(store.BreakerOpen), h.attempt, reason)
	t.breakers.bump = true
	return nil
}

// breakerSucceeded resets the count and closes the breaker.
func (t *txn) breakerSucceeded(h breakerHit, known map[string]knownBreaker) error {
	k := known[h.key]
	switch {
	case k.state != store.BreakerClosed:
		res, err := t.exec(`UPDATE breakers SET state = 'closed', failures = 0, opened_at = NULL, probe_at = NULL, probe_step_id = NULL, updated_at = ?
			WHERE breaker_key = ? AND state <> 'closed'`, t.now, h.key)
		if err != nil {
			return fmt.Errorf("close breaker %s: %w", h.key, err)
		}
		known[h.key] = knownBreaker{state: store.BreakerClosed}
		if n, _ := res.RowsAffected(); n == 0 {
			return nil // closed meanwhile
		}
		reason := fmt.Sprintf("breaker %s closed: the step succeeded", h.key)
		t.audit(h.taskID, h.name, breakerState(k.state), breakerState(store.BreakerClosed), h.attempt, reason)
		t.readied++ // the held steps may run: wake the engines
		t.breakers.bump = true
		return nil
	case k.failures > 0:
		if _, err := t.exec(`UPDATE breakers SET failures = 0, updated_at = ? WHERE breaker_key = ? AND state = 'closed'`, t.now, h.key); err != nil {
			return fmt.Errorf("reset breaker %s: %w", h.key, err)
		}
		known[h.key] = knownBreaker{state: store.BreakerClosed}
		t.breakers.bump = true // its steps are claimed freely again
	}
	return nil
}

// breakerProbeReturned lets the next claim probe when the probe gave its
// claim back without an outcome (released, snoozed, its engine died): the
// breaker is open again with its cooldown already passed.
func (t *txn) breakerProbeReturned(h breakerHit) error {
	res, err := t.exec(`UPDATE breakers SET state = 'open', probe_at = NULL, probe_step_id = NULL, updated_at = ?
		WHERE breaker_key = ? AND state = 'half-open' AND probe_step_id = ?`, t.now, h.key, h.stepID)
	if err != nil {
		return fmt.Errorf("return the probe of breaker %s: %w", h.key, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return nil
	}
	t.audit(h.taskID, h.name, breakerState(store.BreakerHalfOpen), breakerState(store.BreakerOpen), h.attempt,
		fmt.Sprintf("breaker %s: the probe gave its claim back; the next claim probes", h.key))
	t.readied++
	t.breakers.bump = true
	return nil
}

// breakerStep is the step name of a breaker key (NAMESPACE/WORKFLOW/STEP).
func breakerStep(key string) string { return key[strings.LastIndexByte(key, '/')+1:] }

// breakerState is how a breaker's state is written in the audit log (see
// store.EventType).
func breakerState(st string) string { return store.BreakerAuditPrefix + st }

// readBreakers reads the breakers that are not closed into p: each holds
// its steps until its time (opened_at or probe_at, plus the cooldown); and
// the closed ones that counted failures (p.wary).
func (t *txn) readBreakers(p *policySet) error {
	rows, err := t.query(`SELECT breaker_key, state = 'closed', COALESCE(CASE WHEN state = 'open' THEN opened_at ELSE probe_at END, 0) + cooldown
		FROM breakers WHERE state <> 'closed' OR failures > 0`)
	if err != nil {
		return fmt.Errorf("read breakers: %w", err)
	}
	type row struct {
		key    string
		closed bool
		until  int64
	}
	got, err := collect(rows, func(r Row) (row, error) {
		var v row
		err := r.Scan(&v.key, &v.closed, &v.until)
		return v, err
	})
	if err != nil {
		return fmt.Errorf("read breakers: %w", err)
	}
	for _, r := range got {
		if r.closed {
			if p.wary == nil {
				p.wary = map[string]bool{}
			}
			p.wary[r.key] = true
			continue
		}
		if p.breakers == nil {
			p.breakers = map[string]int64{}
		}
		p.breakers[r.key] = r.until
	}
	return nil
}

// breakerRoom is what one claim knows of the breakers: when each that is
// not closed may probe, and the breakers it has decided on (probed, or
// found probed elsewhere): their steps are skipped for the rest of the
// claim.
type breakerRoom struct {
	until   map[string]int64
	now     int64
	decided map[string]bool
	peek    bool                // PeekClaim: a step that may probe is offered, no probe is taken
	probed  map[int64]candidate // the probes this claim took, by step id
	// wary: the closed breakers with failures counted; room: how many
	// more steps under each this claim may take (waryRoom).
	wary map[string]bool
	room map[string]int
}

func newBreakerRoom(p *policySet, now int64) *breakerRoom {
	if p == nil || len(p.breakers) == 0 && len(p.wary) == 0 {
		return nil
	}
	return &breakerRoom{until: p.breakers, now: now, wary: p.wary}
}

// held lists the breakers whose steps the claim query skips: those still
// cooling down and those this claim has decided on.
func (b *breakerRoom) held() []string {
	if b == nil {
		return nil
	}
	var out []string
	for key, until := range b.until {
		if b.now < until || b.decided[key] {
			out = append(out, key)
		}
	}
	for key := range b.wary {
		if _, open := b.until[key]; !open && b.decided[key] {
			out = append(out, key)
		}
	}
	sort.Strings(out)
	return out
}

// decide marks a breaker decided for the rest of the claim: its steps are
// skipped.
func (b *breakerRoom) decide(key string) {
	if b.decided == nil {
		b.decided = map[string]bool{}
	}
	b.decided[key] = true
}

// takeWary reports whether the claim may take candidate c under a closed
// breaker that counted failures, and counts it.
func (t *txn) takeWary(c candidate, b *breakerRoom) (bool, error) {
	if b.decided[c.breakerKey] {
		return false, nil
	}
	if b.peek {
		return true, nil
	}
	room, known := b.room[c.breakerKey]
	if !known {
		var err error
		if room, err = t.waryRoom(c.breakerKey); err != nil {
			return false, err
		}
		if b.room == nil {
			b.room = map[string]int{}
		}
	}
	if room <= 0 {
		b.decide(c.breakerKey)
		return false, nil
	}
	b.room[c.breakerKey] = room - 1
	return true, nil
}

// waryRoom is how many steps under breaker key a claim may take: its
// threshold less the failures counted (this transaction's own outcomes
// included) and the steps under it still running. Read under the
// breaker's row lock on PostgreSQL: a claim or an outcome holding it makes
// this claim take none (the next claim reads again).
func (t *txn) waryRoom(key string) (int, error) {
	lock := ""
	if t.s.d.ClaimLock != "" {
		lock = " " + t.s.d.ClaimLock
	}
	var st string
	var failures, threshold int
	err := t.queryRow(`SELECT state, failures, threshold FROM breakers WHERE breaker_key = ?`+lock, key).Scan(&st, &failures, &threshold)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil // held by another transaction, or reset meanwhile: the next claim reads again
	}
	if err != nil {
		return 0, fmt.Errorf("read breaker %s: %w", key, err)
	}
	if st != store.BreakerClosed {
		return 0, nil // it opened meanwhile
	}
	for _, h := range t.breakers.hits {
		if h.key == key && h.kind == hitFailure {
			failures++
		}
	}
	var running int
	if err := t.queryRow(`SELECT count(*) FROM steps WHERE state = 'running' AND breaker_key = ?`, key).Scan(&running); err != nil {
		return 0, fmt.Errorf("count the running steps of breaker %s: %w", key, err)
	}
	return threshold - failures - running, nil
}

// probes keeps, of the candidates under a breaker that may probe, one
// probe per breaker when its row agrees, and drops the others.
func (t *txn) probes(cands []candidate, b *breakerRoom) ([]candidate, error) {
	if b == nil {
		return cands, nil
	}
	kept := cands[:0:0]
	for _, c := range cands {
		if _, open := b.until[c.breakerKey]; c.breakerKey != "" && !open && b.wary[c.breakerKey] {
			ok, err := t.takeWary(c, b)
			if err != nil {
				return nil, err
			}
			if ok {
				kept = append(kept, c)
			}
			continue
		}
		if _, open := b.until[c.breakerKey]; c.breakerKey == "" || !open {
			kept = append(kept, c)
			continue
		}
		if b.decided[c.breakerKey] {
			continue
		}
		if b.decided == nil {
			b.decided = map[string]bool{}
		}
		b.decided[c.breakerKey] = true
		if b.peek {
			kept = append(kept, c)
			continue
		}
		ok, err := t.takeProbe(c)
		if err != nil {
			return nil, err
		}
		if ok {
			kept = append(kept, c)
			if b.probed == nil {
				b.probed = map[int64]candidate{}
			}
			b.probed[c.id] = c
		}
	}
	return kept, nil
}

// unprobed gives back the place of each probe this claim took but does not
// claim after all (its rate deferred it): the breaker is open again with
// its cooldown passed.
func (t *txn) unprobed(kept []candidate, b *breakerRoom) error {
	if b == nil || len(b.probed) == 0 {
		return nil
	}
	// The probes of this round only: the next round starts afresh.
	probed := b.probed
	b.probed = nil
	claimed := make(map[int64]bool, len(kept))
	for _, c := range kept {
		claimed[c.id] = true
	}
	for id, c := range probed {
		if claimed[id] {
			continue
		}
		if err := t.breakerProbeReturned(breakerHit{stepID: id, taskID: c.taskID, name: breakerStep(c.breakerKey), key: c.breakerKey}); err != nil {
			return err
		}
	}
	return nil
}

// takeProbe makes c the probe of its breaker if the breaker may probe now.
func (t *txn) takeProbe(c candidate) (bool, error) {
	// A row another transaction holds is skipped, not waited for: that
	// one is probing, or recording an outcome that moves the breaker.
	lock := ""
	if t.s.d.ClaimLock != "" {
		lock = " " + t.s.d.ClaimLock
	}
	res, err := t.exec(`UPDATE breakers SET state = 'half-open', probe_step_id = ?, probe_at = ?, updated_at = ?
		WHERE breaker_key = (SELECT breaker_key FROM breakers WHERE breaker_key = ?`+lock+`)
		AND ((state = 'open' AND opened_at + cooldown <= ?)
			OR (state = 'half-open' AND probe_at + cooldown <= ?
				AND NOT EXISTS (SELECT 1 FROM steps WHERE steps.id = breakers.probe_step_id AND steps.state = 'running')))`,
		c.id, t.now, t.now, c.breakerKey, t.now, t.now)
	if err != nil {
		return false, fmt.Errorf("take the probe of breaker %s: %w", c.breakerKey, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return false, nil // probing elsewhere
	}
	t.audit(c.taskID, breakerStep(c.breakerKey), breakerState(store.BreakerOpen), breakerState(store.BreakerHalfOpen), 0,
		fmt.Sprintf("breaker %s: step %d claimed as its probe", c.breakerKey, c.id))
	t.breakers.bump = true
	return true, nil
}

// ListBreakers returns every breaker with a row, by key.
func (s *Store) ListBreakers(ctx context.Context) ([]store.Breaker, error) {
	rows, err := s.read(ctx, `SELECT `+breakerColumnsSQL+` FROM breakers ORDER BY breaker_key`)
	if err != nil {
		return nil, fmt.Errorf("list breakers: %w", err)
	}
	out, err := collect(rows, scanBreaker)
	if err != nil {
		return nil, fmt.Errorf("list breakers: %w", err)
	}
	if out == nil {
		out = []store.Breaker{}
	}
	return out, nil
}

const breakerColumnsSQL = `breaker_key, state, failures, threshold, cooldown, opened_at, probe_at, probe_step_id, updated_at`

func scanBreaker(r Row) (store.Breaker, error) {
	var b store.Breaker
	var cooldown, updated int64
	var opened, probeAt, probe sql.NullInt64
	if err := r.Scan(&b.Key, &b.State, &b.Failures, &b.Threshold, &cooldown, &opened, &probeAt, &probe, &updated); err != nil {
		return b, err
	}
	b.Cooldown = time.Duration(cooldown) * time.Microsecond
	b.UpdatedAt = time.UnixMicro(updated)
	b.ProbeStepID = probe.Int64
	at := func(v int64) *time.Time { x := time.UnixMicro(v); return &x }
	if opened.Valid && b.State != store.BreakerClosed {
		b.OpenedAt = at(opened.Int64)
	}
	switch {
	case b.State == store.BreakerOpen && opened.Valid:
		b.RetryAt = at(opened.Int64 + cooldown)
	case b.State == store.BreakerHalfOpen && probeAt.Valid:
		b.ProbeAt = at(probeAt.Int64)
		b.RetryAt = at(probeAt.Int64 + cooldown)
	}
	return b, nil
}

// ResetBreaker closes a breaker, forgets its count, and audits the reset.
func (s *Store) ResetBreaker(ctx context.Context, r store.BreakerReset) (store.Breaker, error) {
	if err := r.Validate(); err != nil {
		return store.Breaker{}, err
	}
	var out store.Breaker
	err := s.write(ctx, "", func(t *txn) error {
		at := t.now
		if !r.At.IsZero() {
			at = r.At.UnixMicro()
		}
		b, err := scanBreaker(t.queryRow(`DELETE FROM breakers WHERE breaker_key = ? RETURNING `+breakerColumnsSQL, r.Key))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("breaker %q: %w", r.Key, store.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("reset breaker %s: %w", r.Key, err)
		}
		t.breakers.bump = true
		if err := t.recordPolicyChange(at, r.Actor, r.Key, "breaker reset (was "+b.State+")", r.Reason); err != nil {
			return err
		}
		t.readied++ // held steps may run
		out = store.Breaker{Key: b.Key, State: store.BreakerClosed, Threshold: b.Threshold, Cooldown: b.Cooldown, UpdatedAt: time.UnixMicro(at)}
		return nil
	})
	if err != nil {
		return store.Breaker{}, err
	}
	return out, nil
}
