// Package slots is an engine's bounded pool of handler slots. The claim loop
// takes slots without blocking, as many as are free; a handler coming back
// from a deferral waits for one with priority over the claim loop, so work
// already started is never starved by new claims.
package slots

import (
	"context"
	"sync"
)

// Pool counts free slots.
type Pool struct {
	mu      sync.Mutex
	free    int
	waiters []chan struct{} // handlers waiting to re-acquire, first come first served
	changed chan struct{}   // signalled when a slot is released to the claim loop
	// wanted: the last TryTake found no slot free; the next Return of
	// slots signals changed.
	wanted bool
}

// New returns a pool of n slots.
func New(n int) *Pool {
	return &Pool{free: n, changed: make(chan struct{}, 1)}
}

// TryTake takes up to n free slots without blocking and returns how many it
// took. Slots wanted by waiting re-acquirers are not free.
func (p *Pool) TryTake(n int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := min(n, p.free)
	if k < 0 {
		k = 0
	}
	p.free -= k
	p.wanted = k == 0 && n > 0
	return k
}

// Release gives one slot back: to the longest-waiting re-acquirer if any,
// otherwise to the pool, waking the claim loop.
func (p *Pool) Release() {
	p.mu.Lock()
	if len(p.waiters) > 0 {
		w := p.waiters[0]
		p.waiters = p.waiters[1:]
		p.mu.Unlock()
		close(w)
		return
	}
	p.free++
	p.mu.Unlock()
	p.signal()
}

// Return gives back k slots taken with TryTake but not used. Waiting
// re-acquirers are served first; unlike Release it does not wake the claim
// loop, which is usually the caller, unless a TryTake found no slot free
// since the slots were taken (another taker held them).
func (p *Pool) Return(k int) {
	p.mu.Lock()
	for ; k > 0 && len(p.waiters) > 0; k-- {
		close(p.waiters[0])
		p.waiters = p.waiters[1:]
	}
	p.free += k
	wake := p.wanted && k > 0
	if wake {
		p.wanted = false
	}
	p.mu.Unlock()
	if wake {
		p.signal()
	}
}

// signal tells the claim loop that slots returned (coalesced).
func (p *Pool) signal() {
	select {
	case p.changed <- struct{}{}:
	default:
	}
}

// Take blocks until it holds a slot or ctx ends.
func (p *Pool) Take(ctx context.Context) error {
	p.mu.Lock()
	if p.free > 0 {
		p.free--
		p.mu.Unlock()
		return nil
	}
	w := make(chan struct{})
	p.waiters = append(p.waiters, w)
	p.mu.Unlock()
	select {
	case <-w:
		return nil
	case <-ctx.Done():
		p.mu.Lock()
		for i, x := range p.waiters {
			if x == w {
				p.waiters = append(p.waiters[:i], p.waiters[i+1:]...)
				p.mu.Unlock()
				return ctx.Err()
			}
		}
		p.mu.Unlock()
		// Release handed us the slot as ctx ended: give it back.
		p.Release()
		return ctx.Err()
	}
}

// Free returns the number of free slots.
func (p *Pool) Free() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.free
}

// Changed is signalled when a slot returns to the pool.
func (p *Pool) Changed() <-chan struct{} { return p.changed }
