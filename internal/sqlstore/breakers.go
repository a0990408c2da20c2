package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/weftrun/weft/internal/sqlstore/sqldb"
	"github.com/weftrun/weft/internal/sqlstore/transition"
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

const breakerColumnsSQL = `breaker_key, state, failures, threshold, cooldown, opened_at, probe_at, probe_step_id, updated_at`

func scanBreaker(r sqldb.Row) (store.Breaker, error) {
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
func (s *claims) ResetBreaker(ctx context.Context, r store.BreakerReset) (store.Breaker, error) {
	if err := r.Validate(); err != nil {
		return store.Breaker{}, err
	}
	var out store.Breaker
	err := s.write(ctx, "", func(t *transition.Tx) error {
		at := t.Now
		if !r.At.IsZero() {
			at = r.At.UnixMicro()
		}
		b, err := scanBreaker(t.QueryRow(`DELETE FROM breakers WHERE breaker_key = ? RETURNING `+breakerColumnsSQL, r.Key))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("breaker %q: %w", r.Key, store.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("reset breaker %s: %w", r.Key, err)
		}
		t.Breakers.Bump = true
		if err := t.RecordPolicyChange(at, r.Actor, r.Key, "breaker reset (was "+b.State+")", r.Reason); err != nil {
			return err
		}
		t.Readied++ // held steps may run
		out = store.Breaker{Key: b.Key, State: store.BreakerClosed, Threshold: b.Threshold, Cooldown: b.Cooldown, UpdatedAt: time.UnixMicro(at)}
		return nil
	})
	if err != nil {
		return store.Breaker{}, err
	}
	return out, nil
}

// ListBreakers returns every breaker with a row, by key.
func (s *claims) ListBreakers(ctx context.Context) ([]store.Breaker, error) {
	rows, err := s.Read(ctx, `SELECT `+breakerColumnsSQL+` FROM breakers ORDER BY breaker_key`)
	if err != nil {
		return nil, fmt.Errorf("list breakers: %w", err)
	}
	out, err := sqldb.Collect(rows, scanBreaker)
	if err != nil {
		return nil, fmt.Errorf("list breakers: %w", err)
	}
	if out == nil {
		out = []store.Breaker{}
	}
	return out, nil
}
