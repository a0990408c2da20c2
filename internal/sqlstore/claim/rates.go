package claim

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/weftrun/weft/internal/sqlstore/sqldb"
	"github.com/weftrun/weft/internal/sqlstore/sqltx"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// This file holds the rate limits of the claim: a step's own rate
// (steps.rate_key, rate_n per rate_per microseconds, computed at
// submission) and a namespace's (policies.rate_n, rate_per). Each is a
// token bucket, a row of rate_buckets holding up to rate_n tokens and
// refilled by rate_n every rate_per. The claim takes the tokens of the
// candidates it is about to claim, for all their buckets, in ONE upsert
// that refills and takes (rateTake); a candidate that gets no token is not
// claimed but deferred: moved to waiting with its run_at at the time a
// token will exist, without using an attempt, in one UPDATE. The
// maintenance leader's Promote makes it ready again then, as it does for
// any step that waits for its run_at.
//
// Where the database runs a claim as one statement (PostgreSQL), a claim
// after one that got every token it asked for makes the upsert part of its
// claim statement, which claims the steps only if every bucket granted all
// it was asked for: under a rate that does not bind, a claim makes no
// statement more than without. When a bucket falls short, that statement
// claims nothing, and the claim reads what the upsert left in the buckets
// and goes on as after a take of its own (rateFallback).
//
// Under a rate far from binding (at least 1,000 a period, its bucket more
// than half full), a take also reserves tokens for the handle's next
// claims (reserves.go), which take them without writing the bucket: a
// claim writes buckets only when a reservation runs out or lapses, and
// then renews those about to lapse, so that most claims write none.
//
// Nothing of this runs while no candidate is under a rate: the claim query
// returns each step's rate key and the namespace rates come with the
// cached policies, so a claim with no rate in force costs a string
// comparison and a map lookup per candidate, and no statement.
//
// Exactness: tokens live in integers (credit = tokens × per_us, refilled
// by limit per microsecond), so every engine computes the same refill. On
// PostgreSQL the upsert locks each bucket row and computes from its latest
// committed value, so concurrent claims on several engines never take more
// tokens than exist; buckets are upserted in key order, and a claim's
// later rounds use only the buckets it already holds (a candidate needing
// another is left ready for the next claim), so claims never wait for each
// other in a cycle. Tokens held reserved are counted in their bucket as
// held, so the bucket and the reservations never exceed the limit
// together (reserves.go). On SQLite the single writer does the same. One table
// serves both stores: an in-memory bucket for a SQLite file one process
// owns would save one statement per claim under a rate but would need a
// second implementation and would lose the buckets on restart, so there
// is none.
//
// Deferrals queue: a bucket remembers the latest time it deferred a step
// to (deferred_to), and the next deferral goes one token interval after
// it, so a backlog under a rate is spread over the times its tokens come
// instead of waking all at once. Tokens are not kept for deferred
// steps: a step that arrives when a token exists takes it, and a deferred
// step that then finds none is deferred again, behind the others. Each
// deferral is audited (ready -> waiting, naming the bucket and the time),
// like every change of a step's state; because deferrals queue, a step is
// deferred about once per token it waits for in the queue, not once per
// claim, so the audit grows with the work, not with the polling.

// BucketPrefixNamespace starts the keys of the buckets of namespace rates;
// those of step rates come from the engine, "step:NS/WORKFLOW/STEP[=VALUE]".
const BucketPrefixNamespace = "ns:"

// rateClaim is what one claim knows of rate buckets across its rounds.
type rateClaim struct {
	locked   map[string]bool // buckets this claim upserted (locked on PostgreSQL)
	deferred map[string]*store.RateDeferral
	granted  []*bucketNeed // buckets that reserved tokens (reserves.go)
}

// bucketNeed is one bucket the candidates of a round need tokens of.
type bucketNeed struct {
	key  string
	rate store.Rate
	want int
	// of want, the tokens taken from the handle's reserve (reserves.go);
	// the rest are asked of the bucket
	local int
	// tokens asked to reserve for the handle's next claims, and tokens of
	// those it held that it used (reserves.go)
	reserve, release int
	// what the upsert returned
	taken, granted int
	deferredTo     int64
	// the candidates that got a token, and how many deferred so far
	used, deferredN int
}

// candidateRates returns the buckets candidate c needs a token of. A step
// rate out of bounds (never written by InsertTasks) is ignored rather than
// left to fail every claim.
func candidateRates(c candidate, pol *policySet, out []string) []string {
	out = out[:0]
	if c.rateKey != "" && c.rateN >= 1 && c.ratePer > 0 {
		out = append(out, c.rateKey)
	}
	if pol != nil {
		if _, ok := pol.rates[c.namespace]; ok {
			out = append(out, BucketPrefixNamespace+c.namespace)
		}
	}
	return out
}

// rated takes the tokens of candidates under a rate and defers those that
// get none. It returns the candidates to claim, in their order.
// probing is set while the round took a breaker's probe: its tokens are
// then taken on their own (a probe the rate defers gives its place back).
func (t *ClaimTx) rated(cs []candidate, pol *policySet, rc *rateClaim, round int, probing bool) ([]candidate, error) {
	if rc == nil {
		return cs, nil // a peek: it takes no token and defers nothing
	}
	var needs map[string]*bucketNeed
	var keys []string
	for _, c := range cs {
		keys = candidateRates(c, pol, keys)
		for _, key := range keys {
			if needs == nil {
				needs = map[string]*bucketNeed{}
			}
			n := needs[key]
			if n == nil {
				n = &bucketNeed{key: key, rate: store.Rate{Limit: c.rateN, Per: time.Duration(c.ratePer) * time.Microsecond}}
				if strings.HasPrefix(key, BucketPrefixNamespace) {
					n.rate = pol.rates[c.namespace]
				}
				needs[key] = n
			}
			n.want++
		}
	}
	if needs == nil {
		return cs, nil // no rate in force: no statement
	}
	// Later rounds on PostgreSQL use only the buckets the claim holds, and
	// the tokens the handle reserved.
	lockedOnly := round > 0 && t.H.Dialect.Lock() != "" // several writers: bucket rows lock
	var upsert []*bucketNeed
	for _, n := range needs {
		n.local = t.Plan.reserves.take(n.key, n.rate, n.want, t.Now)
		if n.local == n.want || lockedOnly && !rc.locked[n.key] {
			continue
		}
		n.reserve = reserveSize(n.rate, n.ask())
		n.release = t.Plan.reserves.release(n.key, n.rate)
		upsert = append(upsert, n)
	}
	if len(upsert) > 0 && round == 0 {
		// A claim that writes buckets anyway renews the reservations the
		// handle would soon stop using, so that the next claims write none.
		upsert = append(upsert, t.Plan.reserves.expiring(t.Now, needs)...)
	}
	sort.Slice(upsert, func(i, j int) bool { return upsert[i].key < upsert[j].key })
	if rc.locked == nil {
		rc.locked = map[string]bool{}
	}
	for _, n := range upsert {
		rc.locked[n.key] = true
	}
	if len(upsert) == 0 {
		return t.assignTokens(cs, pol, rc, needs, nil, lockedOnly) // all reserved
	}
	if round == 0 && t.H.Dialect.WithWrites() && t.Plan.ratesGranted.Load() && !probing {
		// The last claim got every token it asked for: this one takes
		// them in its claim statement, which claims only if every bucket
		// grants all (claim; rateFallback otherwise).
		t.rateTake = &optimisticTake{cs: cs, pol: pol, rc: rc, needs: needs, upsert: upsert}
		return cs, nil
	}
	if err := t.takeTokens(upsert); err != nil {
		return nil, err
	}
	rc.reserved(upsert)
	out, err := t.assignTokens(cs, pol, rc, needs, upsert, lockedOnly)
	if err == nil && round == 0 {
		t.Plan.ratesGranted.Store(len(out) == len(cs)) // every token asked for
	}
	return out, err
}

// optimisticTake is a take of rate tokens left to the claim statement: the
// candidates it was for and what they need of each bucket.
type optimisticTake struct {
	full   bool // the round's query returned all it was asked for
	cs     []candidate
	pol    *policySet
	rc     *rateClaim
	needs  map[string]*bucketNeed
	upsert []*bucketNeed
}

// readGrants reads the tokens the claim statement reserved, as "KEY N",
// into the take's buckets.
func (o *optimisticTake) readGrants(grants []string) error {
	byKey := make(map[string]*bucketNeed, len(o.upsert))
	for _, n := range o.upsert {
		byKey[n.key] = n
	}
	for _, g := range grants {
		i := strings.LastIndexByte(g, ' ')
		n, err := strconv.Atoi(g[i+1:])
		if i < 0 || err != nil {
			return fmt.Errorf("read reserved tokens %q: not KEY N", g)
		}
		if b := byKey[g[:i]]; b != nil {
			b.granted = n
		}
	}
	o.rc.reserved(o.upsert)
	return nil
}

// reserved notes the buckets of upsert that reserved tokens, for the
// handle to hold once the claim commits.
func (rc *rateClaim) reserved(upsert []*bucketNeed) {
	for _, n := range upsert {
		if n.granted > 0 {
			rc.granted = append(rc.granted, n)
		}
	}
}

// claimTaken claims the steps ids (claim) and, when the claim statement
// took their rate tokens (an optimistic take) but claimed nothing, since a
// bucket could not grant all, finishes the claim as after a take of its
// own (rateFallback). short reports that the take then left some of ids
// unclaimed while the round's query returned all it was asked for: the
// next round may find more, as after a take of its own.
func (t *ClaimTx) claimTaken(ids []int64, leaseID int64) (got []store.ClaimedStep, deps [][]int, short bool, err error) {
	got, deps, err = t.claim(ids, leaseID)
	o := t.rateTake
	if err != nil || o == nil {
		return got, deps, false, err
	}
	t.rateTake = nil
	t.Plan.ratesGranted.Store(len(got) > 0)
	if len(got) > 0 {
		return got, deps, false, nil
	}
	kept, err := t.rateFallback(o)
	if err != nil || len(kept) == 0 {
		return nil, nil, o.full && len(ids) > 0, err
	}
	got, deps, err = t.claim(kept, leaseID)
	return got, deps, o.full && len(kept) < len(ids), err
}

// rateFallback finishes a claim whose statement took rate tokens but
// claimed nothing, since a bucket could not grant all: it reads what the
// take left in each bucket and does what rated does after a take, and
// returns the steps to claim.
func (t *ClaimTx) rateFallback(o *optimisticTake) ([]int64, error) {
	keys := make([]string, len(o.upsert))
	for i, n := range o.upsert {
		keys[i] = n.key
	}
	in, args := t.TextIn("key", keys)
	rows, err := t.Query(`SELECT key, taken, granted, deferred_to FROM rate_buckets WHERE `+in, args...)
	if err != nil {
		return nil, fmt.Errorf("read rate tokens taken: %w", err)
	}
	if err := took(rows, o.upsert); err != nil {
		return nil, err
	}
	o.rc.reserved(o.upsert)
	out, err := t.assignTokens(o.cs, o.pol, o.rc, o.needs, o.upsert, false)
	return idsOf(out), err
}

// assignTokens gives the tokens a take got (needs, upsert) to candidates
// cs, defers those that get none and gives back what is left over.
func (t *ClaimTx) assignTokens(cs []candidate, pol *policySet, rc *rateClaim, needs map[string]*bucketNeed, upsert []*bucketNeed, lockedOnly bool) ([]candidate, error) {
	var keys []string
	// In claim order, a candidate is claimed when every bucket it needs
	// has a token left for it; one that lacks a token of any is deferred
	// to the latest of the times its buckets queue it at.
	out := cs[:0:0]
	type deferral struct {
		id    int64
		until int64
		key   string
	}
	var deferrals []deferral
	for _, c := range cs {
		keys = candidateRates(c, pol, keys)
		ok, held := true, true
		for _, key := range keys {
			n := needs[key]
			if n.used < n.local {
				continue // a reserved token
			}
			if lockedOnly && !rc.locked[key] {
				held = false
			} else if n.used >= n.local+n.taken {
				ok = false
			}
		}
		switch {
		case !held:
			// left ready for the next claim
		case ok:
			for _, key := range keys {
				needs[key].used++
			}
			out = append(out, c)
		default:
			var until int64
			var why string
			for _, key := range keys {
				n := needs[key]
				if n.used < n.local+n.taken {
					continue
				}
				at := n.slot()
				if at > until {
					until, why = at, key
				}
			}
			deferrals = append(deferrals, deferral{c.id, until, why})
		}
	}
	// Tokens taken for candidates that another bucket held back go back,
	// in one statement (in key order, as upsert is); reserved tokens are
	// used first, and those left over are lost.
	type given struct {
		key string
		n   int64
	}
	var back []given
	for _, n := range upsert {
		if k := n.taken - max(n.used-n.local, 0); k > 0 {
			back = append(back, given{n.key, int64(k)})
		}
	}
	if len(back) > 0 {
		from, args := sqltx.Rowset(t.Tx, "g", back,
			sqltx.TextCol("g_key", func(g *given) string { return g.key }),
			sqltx.IntCol("g_n", func(g *given) int64 { return g.n }))
		if _, err := t.Exec(`UPDATE rate_buckets SET credit = CASE WHEN credit + g_n * per_us > limit_n * per_us THEN limit_n * per_us ELSE credit + g_n * per_us END
			FROM `+from+` WHERE rate_buckets.key = g_key`, args...); err != nil {
			return nil, fmt.Errorf("return rate tokens: %w", err)
		}
	}
	if len(deferrals) == 0 {
		return out, nil
	}
	if err := state.CheckStep(state.StepReady, state.StepWaiting); err != nil {
		return nil, err
	}
	args := make([]any, 0, 3*len(deferrals))
	var cases strings.Builder
	for _, d := range deferrals {
		cases.WriteString(" WHEN ? THEN CAST(? AS BIGINT)")
		args = append(args, d.id, d.until)
	}
	why := make(map[int64]string, len(deferrals))
	for _, d := range deferrals {
		args = append(args, d.id)
		why[d.id] = d.key
	}
	rows, err := t.Query(`UPDATE steps SET state = 'waiting', run_at = CASE id`+cases.String()+` END
		WHERE id IN (`+sqltx.Placeholders(len(deferrals))+`) AND state = 'ready' RETURNING id, task_id, name, attempt, run_at`, args...)
	if err != nil {
		return nil, fmt.Errorf("defer rate-limited steps: %w", err)
	}
	type deferredRow struct {
		id, task int64
		name     string
		attempt  int
		runAt    int64
	}
	got, err := sqldb.Collect(rows, func(r sqldb.Row) (deferredRow, error) {
		var d deferredRow
		err := r.Scan(&d.id, &d.task, &d.name, &d.attempt, &d.runAt)
		return d, err
	})
	if err != nil {
		return nil, fmt.Errorf("defer rate-limited steps: %w", err)
	}
	if rc.deferred == nil {
		rc.deferred = map[string]*store.RateDeferral{}
	}
	for _, d := range got {
		key := why[d.id]
		until := time.UnixMicro(d.runAt)
		t.Audit(d.task, d.name, string(state.StepReady), string(state.StepWaiting), d.attempt,
			fmt.Sprintf("rate limit %s: no token until %s", key, until.UTC().Format(time.RFC3339Nano)))
		rd := rc.deferred[key]
		if rd == nil {
			rd = &store.RateDeferral{Key: key}
			rc.deferred[key] = rd
		}
		rd.Steps++
		if until.After(rd.Until) {
			rd.Until = until
		}
	}
	return out, nil
}

// slot returns the time the bucket queues its next deferred candidate at:
// the upsert queued want - taken of them, the last at deferredTo, one
// token interval apart.
func (n *bucketNeed) slot() int64 {
	interval := rateInterval(n.rate)
	queued := int64(n.ask() - n.taken)
	at := n.deferredTo - (queued-1-int64(n.deferredN))*interval
	n.deferredN++
	return at
}

// ask is how many tokens the round asks of the bucket: those it wants
// that the handle did not hold reserved.
func (n *bucketNeed) ask() int { return n.want - n.local }

// rateInterval is the time between two tokens, in microseconds, rounded
// up so that a token exists at the time it names.
func rateInterval(r store.Rate) int64 {
	per := r.Per.Microseconds()
	return (per + int64(r.Limit) - 1) / int64(r.Limit)
}

// RateTakeSet is the upsert's update of an existing bucket: refill it to
// the claim's time (at most to its limit less the tokens engines hold
// reserved), take what is wanted of the whole tokens, reserve what is
// asked if the bucket can spare it (reserves.go), and queue the rest
// after the bucket's last deferral. It reads the row as locked, so
// concurrent claims see each other's takes. excluded.reserved is the
// reservation asked for, excluded.reserved_until the time it would end,
// excluded.released how many of the tokens the claim's handle held it
// used since it last wrote the bucket.
//
// Each value is computed once, in nested subqueries, from the values of
// the one inside it; fence ends each subquery so that the planner keeps
// it (Dialect.Fence). Written as one expression per column, every use of
// a value repeated the text of what it is made of: 35 KB of text to
// parse, plan and evaluate for each bucket (bench/results/policies-2026-11.md,
// "the take of rate tokens computed once").
//
// The refill since the last write counts the tokens held then (held_then),
// up to a period after they lapse: a bucket refilled past them before they
// lapsed would hold more than the limit with them. What stays held from
// now (held) is what has not lapsed, less what the handle released.
func RateTakeSet(fence string) string {
	return strings.ReplaceAll(`(limit_n, per_us, wanted, taken, credit, deferred_to, refilled_at, reserved, reserved_until, granted, released) = (SELECT
		excluded.limit_n, excluded.per_us, excluded.wanted, take, lft,
		CASE WHEN excluded.wanted > take THEN (CASE WHEN nxt > rate_buckets.deferred_to + iv THEN nxt ELSE rate_buckets.deferred_to + iv END) + (excluded.wanted - take - 1) * iv
			ELSE rate_buckets.deferred_to END,
		at, held + grnt,
		CASE WHEN grnt > 0 AND excluded.reserved_until > rate_buckets.reserved_until THEN excluded.reserved_until ELSE rate_buckets.reserved_until END,
		grnt, excluded.released
	FROM (SELECT take, grnt, lft, held, at, iv, at + (excluded.per_us - lft + excluded.limit_n - 1) / excluded.limit_n AS nxt
	FROM (SELECT take, grnt, held, at, iv, refill - (take + grnt) * excluded.per_us AS lft
	FROM (SELECT refill, held, at, iv,
		CASE WHEN excluded.wanted < avail THEN excluded.wanted ELSE avail END AS take,
		CASE WHEN excluded.reserved > 0 AND avail - excluded.wanted - excluded.reserved >= excluded.limit_n / 2
			AND held + excluded.reserved <= excluded.limit_n / 4 THEN excluded.reserved ELSE 0 END AS grnt
	FROM (SELECT refill, refill / excluded.per_us AS avail, held, at, iv
	FROM (SELECT CASE WHEN r0 > cap THEN cap ELSE r0 END AS refill, held, at, iv
	FROM (SELECT
		(CASE WHEN rate_buckets.per_us = excluded.per_us THEN rate_buckets.credit ELSE rate_buckets.credit / rate_buckets.per_us * excluded.per_us END)
			+ (CASE WHEN e <= 0 THEN 0 WHEN e > excluded.per_us THEN excluded.per_us ELSE e END) * excluded.limit_n AS r0,
		(CASE WHEN excluded.limit_n > held_then THEN excluded.limit_n - held_then ELSE 0 END) * excluded.per_us AS cap,
		CASE WHEN rate_buckets.reserved_until <= excluded.refilled_at THEN 0
			WHEN rate_buckets.reserved > excluded.released THEN rate_buckets.reserved - excluded.released ELSE 0 END AS held,
		CASE WHEN e > 0 THEN excluded.refilled_at ELSE rate_buckets.refilled_at END AS at,
		(excluded.per_us + excluded.limit_n - 1) / excluded.limit_n AS iv
	FROM (SELECT excluded.refilled_at - rate_buckets.refilled_at AS e,
		CASE WHEN rate_buckets.reserved_until + rate_buckets.per_us <= excluded.refilled_at THEN 0 ELSE rate_buckets.reserved END AS held_then{F}) AS s0{F}) AS s1{F}) AS s2{F}) AS s3{F}) AS s4{F}) AS s5{F}) AS s6)`, "{F}", fence)
}

// takeTokens refills and takes the tokens of buckets, in one statement,
// and records in each what it took, what is left and where its deferrals
// queue.
func (t *ClaimTx) takeTokens(needs []*bucketNeed) error {
	if len(needs) == 0 {
		return nil
	}
	q, args := t.rateTakeQuery(needs)
	rows, err := t.Query(q+` RETURNING key, taken, granted, deferred_to`, args...)
	if err != nil {
		return fmt.Errorf("take rate tokens: %w", err)
	}
	return took(rows, needs)
}

// took reads rows of (key, taken, granted, deferred_to) into needs.
func took(rows sqldb.Rows, needs []*bucketNeed) error {
	type takeRow struct {
		key            string
		taken, granted int
		deferredTo     int64
	}
	got, err := sqldb.Collect(rows, func(r sqldb.Row) (takeRow, error) {
		var x takeRow
		err := r.Scan(&x.key, &x.taken, &x.granted, &x.deferredTo)
		return x, err
	})
	if err != nil {
		return fmt.Errorf("take rate tokens: %w", err)
	}
	byKey := make(map[string]*bucketNeed, len(needs))
	for _, n := range needs {
		byKey[n.key] = n
	}
	for _, x := range got {
		if n := byKey[x.key]; n != nil {
			n.taken, n.granted, n.deferredTo = x.taken, x.granted, x.deferredTo
		}
	}
	return nil
}

// rateTakeQuery is the upsert that refills and takes the tokens of needs
// (sorted by key), without its RETURNING, and its arguments.
func (t *ClaimTx) rateTakeQuery(needs []*bucketNeed) (string, []any) {
	type bucket struct {
		key                                                          string
		limit, per, credit, want, take, queued, reserve, until, rels int64
	}
	rows := make([]bucket, len(needs))
	for i, n := range needs {
		// A new bucket starts full, and grants what it is asked to
		// reserve (reserveSize asks only what a full bucket grants).
		per := n.rate.Per.Microseconds()
		limit := int64(n.rate.Limit)
		want, reserve := int64(n.ask()), int64(n.reserve)
		take := min(want, limit)
		credit := (limit - take - reserve) * per
		var queued int64
		if d := want - take; d > 0 {
			interval := rateInterval(n.rate)
			next := t.Now + (per-credit+limit-1)/limit
			queued = next + (d-1)*interval
		}
		var until int64
		if reserve > 0 {
			until = t.Now + reserveHold(n.rate)
		}
		rows[i] = bucket{n.key, limit, per, credit, want, take, queued, reserve, until, int64(n.release)}
	}
	// One statement text whatever the number of buckets (a rowset), so
	// that PostgreSQL plans it once per connection; in key order. The
	// claim's time, the same for every bucket, is a parameter of its own.
	from, args := sqltx.Rowset(t.Tx, "b", rows,
		sqltx.TextCol("b_key", func(b *bucket) string { return b.key }),
		sqltx.IntCol("b_limit", func(b *bucket) int64 { return b.limit }),
		sqltx.IntCol("b_per", func(b *bucket) int64 { return b.per }),
		sqltx.IntCol("b_credit", func(b *bucket) int64 { return b.credit }),
		sqltx.IntCol("b_wanted", func(b *bucket) int64 { return b.want }),
		sqltx.IntCol("b_taken", func(b *bucket) int64 { return b.take }),
		sqltx.IntCol("b_queued", func(b *bucket) int64 { return b.queued }),
		sqltx.IntCol("b_reserve", func(b *bucket) int64 { return b.reserve }),
		sqltx.IntCol("b_until", func(b *bucket) int64 { return b.until }),
		sqltx.IntCol("b_released", func(b *bucket) int64 { return b.rels }))
	// WHERE true: SQLite reads "ON CONFLICT" after a bare FROM as a join.
	return `INSERT INTO rate_buckets (key, limit_n, per_us, credit, refilled_at, wanted, taken, deferred_to, reserved, reserved_until, granted, released)
		SELECT b_key, b_limit, b_per, b_credit, ` + t.Scalar(sqltx.ColInt) + `, b_wanted, b_taken, b_queued, b_reserve, b_until, b_reserve, b_released FROM ` + from + ` WHERE true
		ON CONFLICT (key) DO UPDATE SET ` + t.Plan.RateSet, append([]any{t.Now}, args...)
}

// reportDeferred tells the claimer what the claim deferred, once it
// committed.
func reportDeferred(p store.ClaimParams, deferred map[string]*store.RateDeferral) {
	if p.Deferred == nil || len(deferred) == 0 {
		return
	}
	out := make([]store.RateDeferral, 0, len(deferred))
	for _, d := range deferred {
		out = append(out, *d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	p.Deferred(out)
}
