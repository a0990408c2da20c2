package claim

import (
	"sync"
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

// reserveMinLimit is the least limit of a bucket whose tokens are reserved
// ahead: below it, a claim takes tokens from the bucket one claim at a
// time.
const reserveMinLimit = 1000

// reserveSize is how many tokens a claim wanting want of a bucket under
// rate asks to reserve: enough for many claims like it, at most a
// sixteenth of the limit; 0 when the rate is too small or the claim so
// large that a full bucket would not grant it.
func reserveSize(rate store.Rate, want int) int {
	if rate.Limit < reserveMinLimit {
		return 0
	}
	r := min(rate.Limit/16, 64*max(want, 1))
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

// expiring returns the buckets whose reservations are past half their use
// at now, other than those of skip: a claim that writes buckets anyway
// renews them with its own, releasing what the handle used of them. It
// forgets the reservations that lapsed.
func (r *reserves) expiring(now int64, skip map[string]*bucketNeed) []*bucketNeed {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*bucketNeed
	for key, res := range r.m {
		if now >= res.until {
			delete(r.m, key)
			continue
		}
		if now >= res.renew && skip[key] == nil {
			// As many as last time: a grant under the same rate, so no
			// more than a full bucket grants.
			out = append(out, &bucketNeed{key: key, rate: res.rate, reserve: res.size, release: res.release()})
			r.m[key] = res
		}
	}
	return out
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
	}
	use := reserveHold(rate) / 2
	res.tokens += granted
	res.held += granted
	res.size = granted
	res.until, res.renew = now+use, now+use/2
	r.m[key] = res
}
