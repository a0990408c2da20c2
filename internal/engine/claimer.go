package engine

import (
	"context"
	"errors"
	"time"

	"github.com/weftrun/weft/internal/event"
	"github.com/weftrun/weft/internal/health"
	"github.com/weftrun/weft/internal/jitter"
	"github.com/weftrun/weft/store"
)

// claimParams is the one claim every step goes through, local or remote:
// the policies that decide what may run (namespace caps today) are
// predicates of this claim, so they hold for every way of running a step.
func (e *Engine) claimParams(holder string, limit int, handlers, namespaces []string, lease int64) store.ClaimParams {
	return store.ClaimParams{EngineID: holder, Limit: limit, Handlers: handlers, Namespaces: namespaces,
		Caps: e.cfg.NamespaceCaps, TaskID: e.onlyTask, LeaseID: lease, Deferred: e.rateDeferred}
}

// claimLoop claims as many ready steps as there are free slots, whenever
// the store made steps ready (here or, through its notification, in another
// process), an outcome was recorded while its last claim left steps under a
// full limit, or the poll interval passes, and when
// a slot frees up while ready work may be waiting for one (the last claim
// filled every slot, or work became ready while none was free). A slot
// that frees up otherwise brings nothing new to claim: its step's outcome
// is not recorded yet.
func (x *executor) run(ctx context.Context) {
	defer x.e.loops.Done()
	timer := time.NewTimer(0)
	defer timer.Stop()
	// Claims that failed but may have committed (their reply was lost):
	// their steps are released before the engine claims again, or they
	// would stay running under this engine's live lease, never started.
	type lostClaim struct {
		engine string
		lease  int64
	}
	var unsure []lostClaim
	// last: the handlers of the last claim that took every free slot.
	var last *launchGroup
	// look: claim on this pass; backlog: ready work may wait for a slot.
	look, backlog := true, true
	for {
		// retryIn is set while the store fails: the loop backs off instead
		// of claiming again at once (its slots return, which would wake it).
		var retryIn time.Duration
		for len(unsure) > 0 && ctx.Err() == nil {
			n, err := x.e.store.ReleaseLease(ctx, unsure[0].engine, unsure[0].lease)
			if err != nil {
				retryIn = x.e.monitor.Failed(ctx, health.LoopClaim, "release a failed claim", err)
				break
			}
			if n > 0 {
				x.e.log.Warn("released steps of a claim whose reply was lost", "count", n, "lease_id", unsure[0].lease)
			}
			unsure = unsure[1:]
		}
		n, got := 0, 0
		deferred := false // the claim moved rate-limited steps out of the way
		// A database deleted or replaced under the engine is not claimed
		// from: the maintenance loop reports it. While the load gate is
		// closed the loop claims nothing and looks again when the gate
		// reads the pressures next.
		gated := retryIn == 0 && x.e.loadGate.Closed()
		if gated {
			retryIn = x.e.loadGate.Wait(time.Now())
		}
		if look && retryIn == 0 && x.e.monitor.DatabaseGone() == nil {
			n = x.slots.TryTake(x.e.cfg.Concurrency)
			if n == 0 {
				backlog = true // claim once a slot frees up
			}
		}
		if n > 0 {
			id, lease := x.e.ID(), store.NewLeaseID()
			p := x.e.claimParams(id, n, x.handlerNames(), x.e.cfg.Namespaces, lease)
			p.Deferred = func(ds []store.RateDeferral) {
				deferred = true
				x.e.rateDeferred(ds)
			}
			held := false
			p.Held = func() { held = true }
			claimed, err := x.e.store.ClaimSteps(ctx, p)
			switch {
			case errors.Is(err, store.ErrEngineLost):
				// The identity the claim was made with, not the current one:
				// the heartbeat may have registered a new one meanwhile.
				x.e.declaredDead(ctx, id)
			case err != nil && ctx.Err() == nil:
				unsure = append(unsure, lostClaim{id, lease})
				retryIn = x.e.monitor.Failed(ctx, health.LoopClaim, "claim", err)
			case err == nil:
				x.e.monitor.Succeeded(health.LoopClaim)
			}
			got = len(claimed)
			backlog = err != nil || got == n
			x.heldBack.Store(held)
			group := x.startClaimed(claimed)
			x.slots.Return(n - got)
			if got > 0 && got == n {
				// There may be more ready work: claimed when the handlers
				// just launched return their slots, if they are quick.
				if quickGroup(last) && !gatherSlots(ctx, group, slotGather) {
					return
				}
				last = group
				continue
			}
		}
		if deferred {
			continue // there may be more ready work
		}
		if look && n == 0 && retryIn == 0 && x.e.monitor.DatabaseGone() == nil {
			x.maybePreempt(ctx) // no slot is free
		}
		look = true
		if retryIn > 0 {
			timer.Reset(retryIn)
			select {
			case <-ctx.Done():
				return
			case <-timer.C:
			}
			continue
		}
		timer.Reset(jitter.Of(x.claimPoll()))
		select {
		case <-ctx.Done():
			return
		case <-x.e.store.Wake():
			x.readyWoke()
		case <-x.e.completer.recorded:
		case <-x.slots.Changed():
			look = backlog
		case <-timer.C:
		}
		// One pass covers every wake that arrived meanwhile.
		for drained := false; !drained; {
			select {
			case <-x.e.store.Wake():
				x.readyWoke()
				look = true
			case <-x.e.completer.recorded:
				look = true
			default:
				drained = true
			}
		}
	}
}

// claimInWrite runs write, a write of the store's that may claim ready
// steps in its own transaction under p (for the engine's free slots, under
// a lease of their own). tried is false where the engine claims nothing
// now (not running or stopping, no handler of its own, no free slot, its
// load gate closed): write did not run. Where write succeeded, launch
// publishes and launches what it claimed, as the claim loop does: the
// caller calls it once, when the events of its own write are out. Where
// write failed, the claim, which may have committed with its reply lost,
// is released.
func (x *executor) claimInWrite(write func(p store.ClaimParams) ([]store.ClaimedStep, error)) (launch func(), tried bool, err error) {
	if x.e.loadGate.Closed() || x.e.monitor.DatabaseGone() != nil {
		return nil, false, nil
	}
	names := x.handlerNames()
	x.e.mu.Lock()
	if len(names) == 0 || !x.e.started || x.e.stopping {
		x.e.mu.Unlock()
		return nil, false, nil
	}
	// Stop waits for these claims to be launched before it waits for the
	// handlers.
	x.claiming.Add(1)
	x.e.mu.Unlock()
	n := x.slots.TryTake(x.e.cfg.Concurrency)
	if n == 0 {
		x.claiming.Done()
		return nil, false, nil
	}
	id, lease := x.e.ID(), store.NewLeaseID()
	claimed, err := write(x.e.claimParams(id, n, names, nil, lease))
	if err != nil {
		x.slots.Return(n)
		x.e.completer.releaseLease(id, lease)
		x.claiming.Done()
		return nil, true, err
	}
	x.slots.Return(n - len(claimed))
	return func() {
		defer x.claiming.Done()
		x.startClaimed(claimed)
	}, true, nil
}

// slotGather bounds how long the claim loop, after a claim that took every
// free slot, waits for the handlers it launched to return theirs
// (gatherSlots).
const slotGather = time.Millisecond

// quickGroup reports whether the claim loop, after a claim that took every
// free slot, waits for the handlers it launched to return theirs before it
// claims again: a claim costs a round trip and a statement whatever its
// size, and under a backlog of quick steps half the slots are always those
// just launched, so the next claim, made at once, would take only the
// other half. It waits if the handlers of the last such claim (last, nil
// if none) all returned within slotGather; handlers that take longer are
// not waited for, their slots claimed as they free up.
func quickGroup(last *launchGroup) bool {
	if last == nil {
		return true
	}
	select {
	case <-last.done:
		return time.Duration(last.took.Load()) <= slotGather
	default:
		return false // still running
	}
}

// gatherSlots waits until the handlers of group have all returned, up to
// wait, and reports whether ctx is still live.
func gatherSlots(ctx context.Context, group *launchGroup, wait time.Duration) bool {
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-group.done:
	case <-t.C:
	case <-ctx.Done():
		return false
	}
	return true
}

// startClaimed publishes and launches steps the engine claimed, for its
// own slots.
func (x *executor) startClaimed(claimed []store.ClaimedStep) *launchGroup {
	if len(claimed) == 0 {
		return nil
	}
	x.e.maint.Stir() // the steps may carry deadlines
	for _, c := range claimed {
		x.e.publishClaimed(c, false)
	}
	return x.launch(claimed)
}

// readyWoke tells those waiting on the engine that the store made steps
// ready.
func (x *executor) readyWoke() {
	x.e.maint.Stir()
	x.e.wakeWaiters()
	x.e.events.Publish(event.Event{Kind: event.Ready})
}
