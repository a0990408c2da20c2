package claim

import (
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/weftrun/weft/internal/sqlstore/sqldb"
	"github.com/weftrun/weft/internal/sqlstore/sqltx"
	"github.com/weftrun/weft/store"
)

// This file holds what a claim does under circuit breakers (see
// breakers.go): the breakers it reads with the policies, the steps it
// skips, the room it leaves under a closed breaker's threshold, and the
// probe it takes of an open one.

// breakerClaim is a claim as its circuit breakers see it.
type breakerClaim struct{ *ClaimTx }

// readBreakers reads the breakers that are not closed into p: each holds
// its steps until its time (opened_at or probe_at, plus the cooldown); and
// the closed ones that counted failures (p.wary).
func (t breakerClaim) readBreakers(p *policySet) error {
	rows, err := t.Query(`SELECT breaker_key, state = 'closed', COALESCE(CASE WHEN state = 'open' THEN opened_at ELSE probe_at END, 0) + cooldown
		FROM breakers WHERE state <> 'closed' OR failures > 0`)
	if err != nil {
		return fmt.Errorf("read breakers: %w", err)
	}
	type row struct {
		key    string
		closed bool
		until  int64
	}
	got, err := sqldb.Collect(rows, func(r sqldb.Row) (row, error) {
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
		if b.now < until && !b.decided[key] {
			out = append(out, key)
		}
	}
	for key := range b.decided {
		out = append(out, key)
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
func (t breakerClaim) takeWary(c candidate, b *breakerRoom) (bool, error) {
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
func (t breakerClaim) waryRoom(key string) (int, error) {
	lock := ""
	if t.H.Dialect.ClaimLock() != "" {
		lock = " " + t.H.Dialect.ClaimLock()
	}
	var st string
	var failures, threshold int
	err := t.QueryRow(`SELECT state, failures, threshold FROM breakers WHERE breaker_key = ?`+lock, key).Scan(&st, &failures, &threshold)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil // held by another transaction, or reset meanwhile: the next claim reads again
	}
	if err != nil {
		return 0, fmt.Errorf("read breaker %s: %w", key, err)
	}
	if st != store.BreakerClosed {
		return 0, nil // it opened meanwhile
	}
	for _, h := range t.Breakers.Hits {
		if h.Key == key && h.Kind == HitFailure {
			failures++
		}
	}
	var running int
	if err := t.QueryRow(`SELECT count(*) FROM steps WHERE state = 'running' AND breaker_key = ?`, key).Scan(&running); err != nil {
		return 0, fmt.Errorf("count the running steps of breaker %s: %w", key, err)
	}
	return threshold - failures - running, nil
}

// probes keeps, of the candidates under a breaker that may probe, one
// probe per breaker when its row agrees, and drops the others.
func (t breakerClaim) probes(cands []candidate, b *breakerRoom) ([]candidate, error) {
	if b == nil {
		return cands, nil
	}
	kept := cands[:0:0]
	for _, c := range cands {
		var take bool
		var err error
		switch _, open := b.until[c.breakerKey]; {
		case b.wary[c.breakerKey]:
			take, err = t.takeWary(c, b)
		case !open: // no breaker, or one closed with no failures
			take = true
		default:
			take, err = t.takeOpen(c, b)
		}
		if err != nil {
			return nil, err
		}
		if take {
			kept = append(kept, c)
		}
	}
	return kept, nil
}

// takeOpen reports whether the claim may take candidate c under a breaker
// that is not closed: as its probe, the first of its steps the claim
// meets, when the breaker's row agrees (takeProbe).
func (t breakerClaim) takeOpen(c candidate, b *breakerRoom) (bool, error) {
	if b.decided[c.breakerKey] {
		return false, nil
	}
	b.decide(c.breakerKey)
	if b.peek {
		return true, nil
	}
	ok, err := t.takeProbe(c)
	if ok {
		if b.probed == nil {
			b.probed = map[int64]candidate{}
		}
		b.probed[c.id] = c
	}
	return ok, err
}

// unprobed gives back the place of each probe this claim took but does not
// claim after all (its rate deferred it): the breaker is open again with
// its cooldown passed.
func (t breakerClaim) unprobed(kept []candidate, b *breakerRoom) error {
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
		if err := BreakerProbeReturned(t.Tx, t.Breakers, BreakerHit{StepID: id, TaskID: c.taskID, Name: breakerStep(c.breakerKey), Key: c.breakerKey}); err != nil {
			return err
		}
	}
	return nil
}

// takeProbe makes c the probe of its breaker if the breaker may probe now.
func (t breakerClaim) takeProbe(c candidate) (bool, error) {
	// A row another transaction holds is skipped, not waited for: that
	// one is probing, or recording an outcome that moves the breaker.
	lock := ""
	if t.H.Dialect.ClaimLock() != "" {
		lock = " " + t.H.Dialect.ClaimLock()
	}
	res, err := t.Exec(`UPDATE breakers SET state = 'half-open', probe_step_id = ?, probe_at = ?, updated_at = ?
		WHERE breaker_key = (SELECT breaker_key FROM breakers WHERE breaker_key = ?`+lock+`)
		AND ((state = 'open' AND opened_at + cooldown <= ?)
			OR (state = 'half-open' AND probe_at + cooldown <= ?
				AND NOT EXISTS (SELECT 1 FROM steps WHERE steps.id = breakers.probe_step_id AND steps.state = 'running')))`,
		c.id, t.Now, t.Now, c.breakerKey, t.Now, t.Now)
	if err != nil {
		return false, fmt.Errorf("take the probe of breaker %s: %w", c.breakerKey, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return false, nil // probing elsewhere
	}
	t.Audit(c.taskID, breakerStep(c.breakerKey), BreakerState(store.BreakerOpen), BreakerState(store.BreakerHalfOpen), 0,
		fmt.Sprintf("breaker %s: step %d claimed as its probe", c.breakerKey, c.id))
	t.Breakers.Bump = true
	return true, nil
}

// breakerHolds skips the steps of the breakers that hold them (held).
type breakerHolds struct{}

func (breakerHolds) exclude(q string, args []any, _ *policySet, keys *KeyRoom) (string, []any) {
	if keys == nil {
		return q, args
	}
	return andIn(q, args, `breaker_key NOT IN`, keys.breakers.held())
}

// BreakerHit is an outcome recorded for a step with a breaker, with the
// breaker's row as the outcome's statement saw it (BreakerReturning).
type BreakerHit struct {
	StepID, TaskID int64
	Name           string
	Attempt        int
	Key            string
	N              int
	Cooldown       int64
	Kind           HitKind
	Row            KnownBreaker
}

// BreakerReturning is what an outcome's fenced update returns of the
// step's breaker (BreakerHit.scan): its key, threshold and cooldown, and
// the state and failures of its row, read in the same statement; none for
// a step without a breaker.
const BreakerReturning = `breaker_key, breaker_n, breaker_cooldown,
	CASE WHEN breaker_key <> '' THEN (SELECT b.state FROM breakers b WHERE b.breaker_key = steps.breaker_key) END,
	CASE WHEN breaker_key <> '' THEN (SELECT b.failures FROM breakers b WHERE b.breaker_key = steps.breaker_key) END`

// Dest returns where to scan BreakerReturning; done fills the row from
// what was scanned (no row: closed, no failures).
func (b *BreakerHit) Dest() (dest []any, done func()) {
	var st sql.NullString
	var failures sql.NullInt64
	return []any{&b.Key, &b.N, &b.Cooldown, &st, &failures}, func() {
		b.Row = KnownBreaker{State: store.BreakerClosed}
		if st.Valid {
			b.Row = KnownBreaker{State: st.String, Failures: int(failures.Int64)}
		}
	}
}

// HitKind is what an outcome means to a breaker.
type HitKind int

const (
	HitNone    HitKind = iota // snoozed, released, skipped, waiting for a child, lease lapsed
	HitSuccess                // completed
	HitFailure                // failed, or to be retried
)

// BreakerWork is what a transaction leaves to do to breakers before it
// commits.
type BreakerWork struct {
	Hits []BreakerHit
	// Bump: the policy version moves once this transaction commits, so
	// that every claim reads the breakers again (the version row is
	// written last, see flushBreakers).
	Bump bool
	// Lapsed: the outcomes recorded are of leases that lapsed (Reap). The
	// engine died, not the step: they do not count, and a probe among them
	// gives its place back.
	Lapsed bool
}

// failed reports whether the transaction recorded a failure under a
// breaker.
func (w *BreakerWork) failed() bool {
	for _, h := range w.Hits {
		if h.Kind == HitFailure {
			return true
		}
	}
	return false
}

// BreakerProbeReturned lets the next claim probe when the probe gave its
// claim back without an outcome (released, snoozed, its engine died): the
// breaker is open again with its cooldown already passed.
func BreakerProbeReturned(t *sqltx.Tx, w *BreakerWork, h BreakerHit) error {
	res, err := t.Exec(`UPDATE breakers SET state = 'open', probe_at = NULL, probe_step_id = NULL, updated_at = ?
		WHERE breaker_key = ? AND state = 'half-open' AND probe_step_id = ?`, t.Now, h.Key, h.StepID)
	if err != nil {
		return fmt.Errorf("return the probe of breaker %s: %w", h.Key, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return nil
	}
	t.Audit(h.TaskID, h.Name, BreakerState(store.BreakerHalfOpen), BreakerState(store.BreakerOpen), h.Attempt,
		fmt.Sprintf("breaker %s: the probe gave its claim back; the next claim probes", h.Key))
	t.Readied++
	w.Bump = true
	return nil
}

// breakerStep is the step name of a breaker key (NAMESPACE/WORKFLOW/STEP).
func breakerStep(key string) string { return key[strings.LastIndexByte(key, '/')+1:] }

// BreakerState is how a breaker's state is written in the audit log (see
// store.EventType).
func BreakerState(st string) string { return store.BreakerAuditPrefix + st }

// KnownBreaker is what an outcome batch knows of a breaker's row.
type KnownBreaker struct {
	State    string
	Failures int
}
