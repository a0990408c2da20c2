package sqlstore

import (
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weftrun/weft/store"
)

// This file holds the tokens a store handle reserves ahead from rate
// buckets far from their limit, so that its next claims take them without
// writing the bucket (rates.go takes them).
//
// A claim that takes tokens from a bucket of at least reserveMinLimit
// tokens a period asks for a few more (reserveSize). The upsert grants them
// only while the bucket stays more than half full after the take and the
// tokens all engines hold reserved stay within a quarter of the limit; it
// records them in the bucket (reserved, reserved_until) and, while they
// are held, refills the bucket only up to its limit less them. So the
// tokens in the bucket and the tokens held never exceed the limit
// together: a step claimed with a reserved token is one a claim could have
// taken from the bucket at that time, and a rate that binds (a bucket half
// empty) reserves nothing and is taken claim by claim, as before. A claim
// that writes the bucket again releases the tokens the handle used since
// its last write: they no longer count as held, and the bucket refills
// past them.
//
// The handle uses its tokens until half the time the bucket holds them for
// (reserveHold), so that engines whose clocks differ by less than that
// agree the bucket still counts them. Tokens it does not use by then are
// lost to the period, as tokens taken by a claim that does not commit are.
// A reservation is applied only once its claim committed; tokens are taken
// out of it before the claim's statements run, and a claim that fails
// loses them.
//
// Where the claim is one statement sent with its first (PostgreSQL:
// candidatesAhead), a handle that holds, of the bucket of each namespace
// rate in force and of the step buckets it reserved, at least as many
// tokens as the claim may take steps, takes that many of each (cover) and
// sends a statement whose gate shuts where a candidate is under a step
// rate it does not cover (gateCovered): every candidate then has a token,
// whichever bucket it is under, and what the claim does not use goes back
// (giveBack). A claim under rates is then one round trip, as one under no
// policy. A reservation used since its grant that is past half its use,
// or holds fewer tokens than a claim, is due: the claim takes its tokens
// in rounds instead, and renews it (expiring), whether or not it writes
// buckets otherwise. One not used since its grant is left to lapse.

// reserveMinLimit is the least limit of a bucket whose tokens are reserved
// ahead: below it, a claim takes tokens from the bucket one claim at a
// time.
const reserveMinLimit = 1000

// reserveSize is how many tokens a claim of up to claim steps wanting want
// of a bucket under rate asks to reserve: enough for many claims like it,
// and for a claim statement to cover the bucket (cover) twice over, at
// most a sixteenth of the limit; 0 when the rate is too small or the claim
// so large that a full bucket would not grant it.
func reserveSize(rate store.Rate, want, claim int) int {
	if rate.Limit < reserveMinLimit {
		return 0
	}
	r := min(rate.Limit/16, max(64*max(want, 1), 2*claim))
	if rate.Limit-want-r < rate.Limit/2 {
		return 0
	}
	return r
}

// reserveHold is how long the bucket counts reserved tokens as held: the
// rate's period, at most 2 seconds. The handle uses them for half of it.
func reserveHold(rate store.Rate) int64 {
	return min(rate.Per, 2*time.Second).Microseconds()
}

// reserve is the tokens a handle holds of one bucket.
type reserve struct {
	rate   store.Rate
	tokens int   // not used yet
	held   int   // counted in the bucket as held: tokens, and those used since the last release
	size   int   // the last reservation's
	until  int64 // the handle uses them before this time (microseconds)
	renew  int64 // a claim that writes buckets renews them from this time
	// name is a step bucket's as a claim statement matches its
	// candidates with it (rateCover.names); "" for a namespace's
	name string
}

// reserves is what a store handle holds of every bucket.
type reserves struct {
	mu sync.Mutex
	m  map[string]reserve
}

// take takes up to want tokens of key under rate at now.
func (r *reserves) take(key string, rate store.Rate, want int, now int64) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	res, ok := r.m[key]
	if !ok {
		return 0
	}
	if res.rate != rate || now >= res.until {
		delete(r.m, key) // lapsed, or of a rate changed since
		return 0
	}
	n := min(want, res.tokens)
	res.tokens -= n
	r.m[key] = res
	return n
}

// release returns how many of the tokens of key the bucket counts as held
// the handle used, for a claim that writes the bucket to release them;
// they count as released from now, whether or not that claim commits (the
// bucket then counts them as held until they lapse).
func (r *reserves) release(key string, rate store.Rate) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	res, ok := r.m[key]
	if !ok || res.rate != rate {
		return 0
	}
	n := res.release()
	r.m[key] = res
	return n
}

// release returns how many of the tokens the bucket counts as held the
// handle used, and counts them as released.
func (res *reserve) release() int {
	n := res.held - res.tokens
	res.held = res.tokens
	return n
}

// due reports whether a reservation the handle used since it last wrote
// its bucket is past half its use at now or, large enough to cover claims
// of need steps, holds fewer than need tokens: a claim of need steps then
// renews it (expiring), even one that would write no bucket otherwise, so
// that the next claims find it covered (cover). One too small to cover
// such claims falls due with time only, or its bucket would be written at
// every claim.
func (res *reserve) due(now int64, need int) bool {
	return res.held > res.tokens && (now >= res.renew || res.size >= need && res.tokens < need)
}

// due reports whether any of the handle's reservations is due at now for
// claims of need steps.
func (r *reserves) due(now int64, need int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, res := range r.m {
		if now < res.until && res.due(now, need) {
			return true
		}
	}
	return false
}

// expiring returns the buckets whose reservations a claim renews at now,
// other than those of skip: the claim writes them with its own, releasing
// what the handle used of them. Where claims cover their rates (covers,
// with need steps: cover), those used since their grant that are due or
// past a quarter of their use, so that they are renewed together and fall
// due together, and claims between renewals find every one covered (one
// not used is left to lapse); elsewhere, those past half their use. It
// forgets the reservations that lapsed.
func (r *reserves) expiring(now int64, need int, skip map[string]bool, covers bool) []*bucketNeed {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*bucketNeed
	for key, res := range r.m {
		if now >= res.until {
			delete(r.m, key)
			continue
		}
		renew := now >= res.renew
		if covers {
			early := now >= res.renew-(res.until-res.renew)/2
			renew = res.held > res.tokens && (early || res.due(now, need))
		}
		if renew && !skip[key] {
			// As many as last time: a grant under the same rate, so no
			// more than a full bucket grants.
			out = append(out, &bucketNeed{key: key, rate: res.rate, reserve: res.size, release: res.release()})
			r.m[key] = res
		}
	}
	return out
}

// rateCover is what a claim statement that covers rates (gateCovered)
// took of the handle's reservations: need tokens of each bucket of keys,
// reserved under rates, usable until until.
type rateCover struct {
	need  int
	keys  []string
	rates []store.Rate
	until []int64
	// names are the step buckets of keys as the statement matches its
	// candidates with them: "RATE_KEY RATE_N RATE_PER".
	names []string
	// used counts the claimed steps of each bucket (readClaimed).
	used map[string]int
}

// cover takes need tokens of every bucket the handle holds reserved, for
// a claim statement of up to need steps that claims only candidates whose
// buckets it covers (gateCovered): then any of its candidates has a token.
// It takes nothing and returns nil where a namespace rate of nsRates is
// not covered (its bucket held, not due, with need tokens), or a
// reservation is due: the claim then takes its tokens in rounds, and
// renews (expiring). A step bucket with fewer than need tokens is left
// out, and a candidate under it shuts the gate.
func (r *reserves) cover(now int64, need int, nsRates map[string]store.Rate) *rateCover {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.m) == 0 {
		return nil
	}
	for ns, rate := range nsRates {
		res, ok := r.m[bucketPrefixNamespace+ns]
		if !ok || res.rate != rate || now >= res.until || now >= res.renew || res.tokens < need {
			return nil
		}
	}
	c := &rateCover{need: need, used: map[string]int{}}
	for key, res := range r.m {
		if now >= res.until {
			continue
		}
		if res.due(now, need) {
			return nil
		}
		if now >= res.renew || res.tokens < need {
			continue // not used since its grant: left to lapse
		}
		c.keys = append(c.keys, key)
		c.rates = append(c.rates, res.rate)
		c.until = append(c.until, res.until)
		if res.name != "" {
			c.names = append(c.names, res.name)
		}
	}
	for _, key := range c.keys {
		res := r.m[key]
		res.tokens -= need
		r.m[key] = res
	}
	return c
}

// coverShut counts down the claims that do not cover their rates after
// one whose gate shut: where the candidates of most claims are under a
// step bucket the handle holds too few tokens of to cover (reserved in
// smaller numbers than a claim's steps), each such gate would shut and
// cost its claim a statement. A claim tries again after coverRest.
type coverShut struct{ left atomic.Int32 }

// coverRest is how many claims do not cover their rates after a gate that
// covered them shut.
const coverRest = 16

func (c *coverShut) shut() { c.left.Store(coverRest) }

// skip reports whether this claim is to leave its rates uncovered, and
// counts it.
func (c *coverShut) skip() bool {
	if c.left.Load() <= 0 {
		return false
	}
	c.left.Add(-1)
	return true
}

// giveBack returns to the handle's reservations the tokens cover took
// that its claim did not use (c.used), at now: those of a reservation
// still held as it was taken (not lapsed, under the same rate).
func (r *reserves) giveBack(c *rateCover, now int64) {
	if c == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, key := range c.keys {
		res, ok := r.m[key]
		if !ok || res.rate != c.rates[i] || now >= c.until[i] {
			continue
		}
		res.tokens += max(c.need-c.used[key], 0)
		r.m[key] = res
	}
}

// add adds tokens granted to key under rate at now, once the claim that
// reserved them committed. The tokens the handle held already stay usable
// as long: the bucket holds them all until the grant's time.
func (r *reserves) add(key string, rate store.Rate, granted int, now int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[string]reserve{}
	}
	res := r.m[key]
	if res.rate != rate || now >= res.until {
		res = reserve{rate: rate}
		if !strings.HasPrefix(key, bucketPrefixNamespace) {
			res.name = key + " " + strconv.Itoa(rate.Limit) + " " + strconv.FormatInt(rate.Per.Microseconds(), 10)
		}
	}
	use := reserveHold(rate) / 2
	res.tokens += granted
	res.held += granted
	res.size = granted
	res.until, res.renew = now+use, now+use/2
	r.m[key] = res
}
