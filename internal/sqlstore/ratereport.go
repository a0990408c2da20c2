package sqlstore

import (
	"context"
	"fmt"
	"time"

	"github.com/weftrun/weft/internal/sqlstore/claim"
	"github.com/weftrun/weft/internal/sqlstore/sqldb"
	"github.com/weftrun/weft/internal/sqlstore/sqltx"
	"github.com/weftrun/weft/internal/sqlstore/transition"
	"github.com/weftrun/weft/store"
)

// This file reads the rate buckets for operators (the tokens of
// ListPolicies) and forgets the buckets nobody needs (PruneRates); the
// claim's takes are in rates.go.

// bucketRow is a row of rate_buckets.
type bucketRow struct {
	key                             string
	limit                           int
	per, credit, refilled, deferred int64
	reserved, reservedUntil         int64
}

// tokens returns the tokens the bucket holds at now under rate, computed
// as the claim's upsert does: whole tokens carry over a change of period,
// then the bucket refills at rate up to its limit, less the tokens engines
// hold reserved (which are not counted as the bucket's).
func (b bucketRow) tokens(rate store.Rate, now int64) float64 {
	per := rate.Per.Microseconds()
	if per <= 0 || b.per <= 0 {
		return 0
	}
	credit := b.credit
	if b.per != per {
		credit = credit / b.per * per
	}
	e := min(max(now-b.refilled, 0), per)
	limit := int64(rate.Limit)
	if b.reservedUntil+b.per > now {
		limit = max(limit-b.reserved, 0)
	}
	c := min(credit+e*int64(rate.Limit), limit*per)
	return float64(c) / float64(per)
}

// scanBuckets reads rows of bucketColumns.
func scanBuckets(rows sqldb.Rows) ([]bucketRow, error) {
	got, err := sqldb.Collect(rows, func(r sqldb.Row) (bucketRow, error) {
		var b bucketRow
		err := r.Scan(&b.key, &b.limit, &b.per, &b.credit, &b.refilled, &b.deferred, &b.reserved, &b.reservedUntil)
		return b, err
	})
	if err != nil {
		return nil, fmt.Errorf("read rate buckets: %w", err)
	}
	return got, nil
}

// maxReportedBuckets bounds how many buckets of step rates ListPolicies
// reports (a keyed rate has one per value).
const maxReportedBuckets = 1000

const bucketColumns = `key, limit_n, per_us, credit, refilled_at, deferred_to, reserved, reserved_until`

// policyTokens fills in the tokens of the policies with a rate from their
// buckets at now, reading them with read (in a transaction or not); a
// namespace whose bucket does not exist yet has every token.
func policyTokens(pols []store.Policy, now int64, read func(q string, args ...any) (sqldb.Rows, error)) error {
	var keys []any
	for _, p := range pols {
		if p.Rate != nil {
			keys = append(keys, claim.BucketPrefixNamespace+p.Target)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	rows, err := read(`SELECT `+bucketColumns+` FROM rate_buckets WHERE key IN (`+sqltx.Placeholders(len(keys))+`)`, keys...)
	if err != nil {
		return fmt.Errorf("read rate buckets: %w", err)
	}
	buckets, err := scanBuckets(rows)
	if err != nil {
		return err
	}
	byKey := make(map[string]bucketRow, len(buckets))
	for _, b := range buckets {
		byKey[b.key] = b
	}
	for i := range pols {
		if pols[i].Rate == nil {
			continue
		}
		tokens := float64(pols[i].Rate.Limit)
		if b, ok := byKey[claim.BucketPrefixNamespace+pols[i].Target]; ok {
			tokens = b.tokens(*pols[i].Rate, now)
		}
		pols[i].Tokens = &tokens
	}
	return nil
}

// reportRates fills in the tokens of the namespace rates of report and
// lists the buckets of step rates.
func (s *claims) reportRates(ctx context.Context, report *store.PolicyReport) error {
	now := s.Clock().UnixMicro()
	report.Rates = []store.RateUsage{}
	read := func(q string, args ...any) (sqldb.Rows, error) { return s.Read(ctx, q, args...) }
	if err := policyTokens(report.Policies, now, read); err != nil {
		return err
	}
	rows, err := s.Read(ctx, `SELECT `+bucketColumns+` FROM rate_buckets WHERE key >= 'step:' AND key < 'step;' ORDER BY key LIMIT ?`, maxReportedBuckets)
	if err != nil {
		return fmt.Errorf("read rate buckets: %w", err)
	}
	buckets, err := scanBuckets(rows)
	if err != nil {
		return err
	}
	for _, b := range buckets {
		rate := store.Rate{Limit: b.limit, Per: time.Duration(b.per) * time.Microsecond}
		u := store.RateUsage{Key: b.key, Rate: rate, Tokens: b.tokens(rate, now)}
		if b.deferred > now {
			at := time.UnixMicro(b.deferred)
			u.DeferredUntil = &at
		}
		report.Rates = append(report.Rates, u)
	}
	return nil
}

// PruneRates deletes the buckets full at now with no deferral to come and
// no tokens held reserved.
func (s *claims) PruneRates(ctx context.Context, now time.Time) (int, error) {
	n := 0
	err := s.write(ctx, "", func(t *transition.Tx) error {
		at := now.UnixMicro()
		res, err := t.Exec(`DELETE FROM rate_buckets WHERE refilled_at + per_us <= ? AND deferred_to <= ? AND reserved_until + per_us <= ?`, at, at, at)
		if err != nil {
			return fmt.Errorf("prune rate buckets: %w", err)
		}
		deleted, _ := res.RowsAffected()
		n = int(deleted)
		return nil
	})
	return n, err
}
