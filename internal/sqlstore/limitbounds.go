package sqlstore

import (
	"sync"
	"time"
)

// This file holds the bounds that spare a claim under limits far from
// binding the count of what runs in their namespace (PostgreSQL, where
// LimitRoom counts under the namespace's lock; migration 024).
//
// limit_claims holds, per namespace, how many steps claims holding the
// namespace's lock have claimed, and how many tasks they have started or
// an operator's retry has put back to running, ever. Only those make a
// step or a task under a limit of the namespace running: a step enters
// running only from ready, by a claim, and a claim of a step under a limit
// holds its namespace's lock; a task enters running from pending, by the
// claim of its first step, or from failed, by a retry (moveTask). So a
// count of what runs in the namespace, with the totals read before it
// under the lock, stays an upper bound of what runs there: the count plus
// what the totals grew by since. The claim statement adds what it claimed
// to the totals of the namespaces it holds (claim), in the same
// transaction.
//
// A handle keeps the last count it made of each namespace (anchor) and
// passes it to LimitRoom with the largest bound it can use: its
// namespace's smallest limit that the last claim met, less the claim's
// size. Below that, every limit of the namespace has room for the whole
// claim whatever runs, so the bound decides as a count would; above it,
// or without a count, LimitRoom counts. A count is used for at most
// anchorLife, and not across a change of the policies (a namespace limit
// set since: steps claimed without the lock before it, the namespace then
// unlimited, are in no total) nor for a namespace under the engine's own
// caps (other engines claim there without the lock).

// anchorLife is how long a handle bounds from one count.
const anchorLife = 10 * time.Second

// limitAnchor is a count of what ran in a namespace and the totals read
// with it.
type limitAnchor struct {
	steps, tasks, stepsTotal, tasksTotal int64
	version                              int64 // of the policies it was counted under
	at                                   int64 // microseconds
}

// limitBounds is what a handle knows of the namespaces with limits.
type limitBounds struct {
	mu      sync.Mutex
	anchors map[string]limitAnchor
	floors  map[string]int // the smallest limit the last claim met in each
}

// known returns LimitRoom's p_known for namespaces: five numbers each, the
// anchor and the largest bound the claim can use, or -1 first where the
// claim must count.
// floors are the smallest limits the claim met so far, if any.
func (b *limitBounds) known(namespaces []string, version, now int64, claim int, caps, floors map[string]int) []int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]int64, 0, 5*len(namespaces))
	for _, ns := range namespaces {
		a, ok := b.anchors[ns]
		floor, hasFloor := b.floors[ns]
		if f, met := floors[ns]; met && (!hasFloor || f < floor) {
			floor, hasFloor = f, true
		}
		_, capped := caps[ns]
		if !ok || !hasFloor || capped || a.version != version || now-a.at >= anchorLife.Microseconds() || floor-claim < 0 {
			out = append(out, -1, 0, 0, 0, 0)
			continue
		}
		out = append(out, a.steps, a.tasks, a.stepsTotal, a.tasksTotal, int64(floor-claim))
	}
	return out
}

// counted keeps the exact counts of namespaces (those LimitRoom counted
// rather than bounded) as anchors.
func (b *limitBounds) counted(namespaces []string, counts map[string]nsCount, version, now int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.anchors == nil {
		b.anchors = map[string]limitAnchor{}
	}
	for _, ns := range namespaces {
		if c := counts[ns]; c.exact {
			b.anchors[ns] = limitAnchor{steps: int64(c.steps), tasks: int64(c.tasks), stepsTotal: c.stepsTotal, tasksTotal: c.tasksTotal,
				version: version, at: now}
		}
	}
}

// met keeps the smallest limit a claim met in each namespace.
func (b *limitBounds) met(floors map[string]int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.floors == nil {
		b.floors = map[string]int{}
	}
	for ns, f := range floors {
		b.floors[ns] = f
	}
}
