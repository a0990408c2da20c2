package claim

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// This file holds the bounds that spare a claim under limits far from
// binding the namespace's lock and the count of what runs there
// (PostgreSQL, where LimitRoom locks and counts; migration 024).
//
// limit_claims holds, per namespace with limits, how many steps claims
// have claimed there and how many tasks they have started or an
// operator's retry has put back to running, ever. Only those make a step
// or a task under a limit of the namespace running: a step enters running
// only from ready, by a claim, and every claim of a step under a limit
// adds to its namespace's totals; a task enters running from pending, by
// the claim of its first step, or from failed, by a retry (MoveTask). So a
// count of what runs in the namespace, with the totals read before it,
// stays an upper bound of what runs there: the count plus what the totals
// grew by since. The claim statement adds what it claimed to the totals
// (claim), and returns them as they are then: the row stays locked by that
// addition until the claim commits, so nothing else enters running in the
// namespace meanwhile, and the bound it gives holds at the commit.
//
// A handle keeps the last count it made of each namespace (anchor) and
// the last totals it saw. A claim whose namespace's bound from them leaves
// room for the whole claim under the smallest limit its last claim met
// there takes neither the lock nor a count: it claims as if that many
// ran, and checks, with the totals its claim statement returned, that the
// bound is still within the smallest limit this claim met (checkBounds);
// every limit of the namespace that it claimed under is at least that. A
// claim that counted, under the lock, checks that nothing entered running
// there between its count and its claim statement, or else the same bound.
// A claim that fails its check is rolled back and made again, counting.
// Claims that bound hold rows of limit_claims without the namespaces'
// locks, so every claim takes those rows in the namespaces' order: one
// statement takes them sorted, and a namespace a later round meets that
// is named before one the claim already took waits for the next claim
// (countNamespaces).
// A claim whose policies its statement can check (limits, weights while
// one namespace alone has ready work: candidatesAhead) and that bounds
// every namespace its last claim met limits in selects and claims in one
// statement, sent with its first and with its COMMIT: that statement
// locks the namespaces' rows of limit_claims first, in their order, reads
// their latest totals, and claims only if the bound from them leaves room
// for the whole claim and no candidate's limit is below the floor
// (gateBoundsShut); otherwise it claims nothing, and the claim is made
// as above.
// (LimitRoom can still bound under the lock from an anchor it is passed,
// as the engines of the version before did; this one passes none.)
// An anchor is used for at most anchorLife, and not across a change of the
// policies (a namespace limit set since: steps claimed before it, the
// namespace then unlimited, are in no total) nor for a namespace under the
// engine's own caps (other engines claim there knowing none of them).

// anchorLife is how long a handle bounds from one count.
const anchorLife = 10 * time.Second

// boundAttempts is how many times a claim is made whose bounds fail their
// check (errBoundMissed); after that it claims nothing this time.
const boundAttempts = 3

// errBoundMissed: what entered running in a namespace since the claim's
// count or anchor leaves less room than it claimed; the claim is rolled
// back and made again, counting.
var errBoundMissed = errors.New("the limits' bound moved during the claim")

// limitAnchor is a count of what ran in a namespace and the totals read
// with it.
type limitAnchor struct {
	steps, tasks, stepsTotal, tasksTotal int64
	version                              int64 // of the policies it was counted under
	at                                   int64 // microseconds
}

// limitTotals are a namespace's totals of claimed steps and started tasks.
type limitTotals struct{ steps, tasks int64 }

// limitBounds is what a handle knows of the namespaces with limits.
type limitBounds struct {
	mu      sync.Mutex
	anchors map[string]limitAnchor
	seen    map[string]limitTotals // the latest totals a claim read
	floors  map[string]int         // the smallest limit the last claim met in each
}

// bound returns the bound of what runs in namespace ns from its anchor and
// the latest totals seen, for a claim of claim steps under the policies
// of version; ok is false where the claim must count: no anchor, or one
// too old or of other policies, the namespace under the engine's own caps,
// or a bound that leaves less room than the claim under its smallest
// limit, as floors (the claim's so far, if any) and the last claim met it.
func (b *limitBounds) bound(ns string, version, now int64, claim int, caps, floors map[string]int) (n nsCount, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	a, known := b.anchors[ns]
	floor, hasFloor := b.floors[ns]
	if f, met := floors[ns]; met && (!hasFloor || f < floor) {
		floor, hasFloor = f, true
	}
	if _, capped := caps[ns]; capped || !known || !hasFloor || a.version != version || now-a.at >= anchorLife.Microseconds() {
		return nsCount{}, false
	}
	seen := b.seen[ns]
	steps := a.steps + max(seen.steps-a.stepsTotal, 0)
	tasks := a.tasks + max(seen.tasks-a.tasksTotal, 0)
	if steps > int64(floor-claim) || tasks > int64(floor-claim) {
		return nsCount{}, false
	}
	return nsCount{steps: int(steps), tasks: int(tasks), bounded: true, floor: floor,
		stepsTotal: a.stepsTotal, tasksTotal: a.tasksTotal, anchorSteps: a.steps, anchorTasks: a.tasks}, true
}

// counted keeps the exact counts of namespaces as anchors.
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

// saw keeps the totals a committed claim read.
func (b *limitBounds) saw(totals map[string]limitTotals) {
	if len(totals) == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.seen == nil {
		b.seen = map[string]limitTotals{}
	}
	for ns, t := range totals {
		b.seen[ns] = t
	}
}

// forget drops the anchors of namespaces, so that the next claim counts
// them.
func (b *limitBounds) forget(namespaces []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, ns := range namespaces {
		delete(b.anchors, ns)
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

// boundMiss is a namespace whose bound failed checkBounds.
type boundMiss struct{ namespaces []string }

func (m *boundMiss) Error() string {
	return fmt.Sprintf("%v in namespaces %v", errBoundMissed, m.namespaces)
}

func (m *boundMiss) Unwrap() error { return errBoundMissed }

// checkBounds checks, for each namespace this claim took steps in and
// added to the totals of, that what runs there stays within the smallest
// limit the claim met (keys.floor), by the totals its claim statements
// returned: a claim that bounded (took no count) by its anchor; one that
// counted by its count, unless nothing else entered running since.
func (t *ClaimTx) checkBounds(k *KeyRoom) error {
	var missed []string
	for ns, got := range t.limitTotals {
		n, own := k.counted[ns], t.limitOwn[ns]
		others := limitTotals{got.steps - own.steps - n.stepsTotal, got.tasks - own.tasks - n.tasksTotal}
		if n.exact && others.steps <= 0 && others.tasks <= 0 {
			continue // counted, and nothing else entered running since
		}
		floor, met := k.floor[ns]
		if !met {
			continue // it claimed under no limit there
		}
		base := limitTotals{int64(n.steps), int64(n.tasks)}
		if n.bounded {
			base = limitTotals{n.anchorSteps, n.anchorTasks}
		}
		if !(n.exact || n.bounded) ||
			base.steps+got.steps-n.stepsTotal > int64(floor) || base.tasks+got.tasks-n.tasksTotal > int64(floor) {
			missed = append(missed, ns)
		}
	}
	if len(missed) > 0 {
		return &boundMiss{namespaces: missed}
	}
	return nil
}

// totaled notes a step the claim statement claimed in namespace ns, whose
// totals it returned as got: one step claimed, and its task started if it
// did.
func (t *ClaimTx) totaled(ns string, started bool, got limitTotals) {
	if t.limitTotals == nil {
		t.limitTotals, t.limitOwn = map[string]limitTotals{}, map[string]limitTotals{}
	}
	t.limitTotals[ns] = got
	t.totalsMax = max(t.totalsMax, ns)
	own := t.limitOwn[ns]
	own.steps++
	if started {
		own.tasks++
	}
	t.limitOwn[ns] = own
}

// splitBounds returns which of namespaces a claim of claim steps under
// the policies of version bounds from the handle's anchors, with their
// bounds, and which it counts.
func (s *Planner) splitBounds(namespaces []string, version, now int64, claim int, caps, floors map[string]int) (bounds map[string]nsCount, count []string) {
	for _, ns := range namespaces {
		n, ok := s.bounds.bound(ns, version, now, claim, caps, floors)
		if !ok {
			count = append(count, ns)
			continue
		}
		if bounds == nil {
			bounds = map[string]nsCount{}
		}
		bounds[ns] = n
	}
	return bounds, count
}

// boundedIn takes the bounds of namespaces into k, as their counts, and
// holds the namespaces.
func (t *ClaimTx) boundedIn(bounds map[string]nsCount, k *KeyRoom) {
	for ns, n := range bounds {
		k.counted[ns] = n
		t.hold(ns)
	}
}

// hold notes a namespace the claim counted or bounded, whose totals its
// claim statements add to.
func (t *ClaimTx) hold(ns string) {
	if !slices.Contains(t.limitHeld, ns) {
		t.limitHeld = append(t.limitHeld, ns)
	}
}
