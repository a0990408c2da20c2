package engine

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/weftrun/weft/store"
)

// This file preempts the steps of remote workers. A worker says in its
// heartbeat when every one of its slots is busy (WorkerLoad.Full); a worker
// that does not say is never preempted. On such a heartbeat the engine
// takes the same decision as for its own steps (preemptor): it peeks with
// the worker's own claim predicates and, if the step the worker would
// claim next is strictly more urgent than the lowest-priority preemptible
// step it holds, the reply asks the worker to stop that step. The worker
// reports the stopped attempt with FailRemote and Failure.Preempted, and
// the engine settles it as it settles its own preempted steps.
//
// A worker is peeked for at most once per half heartbeat interval, and has
// at most one preemption in flight: until the step asked for is reported
// (or no longer held), its heartbeats repeat that request and ask nothing
// new. This state is the engine's memory of the workers it talks to; an
// engine that has none (another server on the same database) decides
// again, and picks the same victim (betterVictim is deterministic).

// WorkerLoad is what a worker's heartbeat tells about its slots, for
// preemption.
type WorkerLoad struct {
	// Full says every slot of the worker is busy.
	Full bool
	// Handlers and Namespaces are the worker's claim predicates, as in its
	// claims; no Handlers means the handlers of the preemptible steps it
	// holds, no Namespaces any.
	Handlers   []string
	Namespaces []string
}

// Preemption asks a worker to stop the step it holds under Fence.
type Preemption struct {
	Fence store.Fence
	// Reason names the step that preempts: `preempted by task N step "X"
	// (priority P)`.
	Reason string
}

// workerPreemptions is the engine's memory of the preemption of each worker.
type workerPreemptions struct {
	mu sync.Mutex
	m  map[string]*workerPreemption
}

type workerPreemption struct {
	lastPeek time.Time
	// The preemption in flight: cause is nil when none.
	fence store.Fence
	cause *preemptedBy
}

// get returns the state of a worker, creating it. The caller holds w.mu.
func (w *workerPreemptions) get(id string) *workerPreemption {
	if w.m == nil || len(w.m) >= maxRemembered {
		w.m = map[string]*workerPreemption{}
	}
	st := w.m[id]
	if st == nil {
		st = &workerPreemption{}
		w.m[id] = st
	}
	return st
}

// take returns and forgets the cause of the preemption of f, if this engine
// asked for it.
func (w *workerPreemptions) take(id string, f store.Fence) *preemptedBy {
	w.mu.Lock()
	defer w.mu.Unlock()
	st := w.m[id]
	if st == nil || st.cause == nil || st.fence != f {
		return nil
	}
	cause := st.cause
	st.cause = nil
	return cause
}

// remotePreempted is the cause of a preemption the worker reports that this
// engine did not ask for (another server did, or this one restarted).
type remotePreempted struct{ msg string }

func (r *remotePreempted) Error() string        { return r.msg }
func (r *remotePreempted) Is(target error) bool { return target == ErrPreempted }

// preemptionCause is the cause recorded for a step a worker reports
// preempted: the one this engine asked with, else the reason the worker
// was given if it reads as one, else ErrPreempted.
func (ws *Workers) preemptionCause(workerID string, f store.Fence, reason string) error {
	if c := ws.preempt.take(workerID, f); c != nil {
		return c
	}
	if strings.HasPrefix(reason, "preempted by ") {
		return &remotePreempted{msg: reason}
	}
	return ErrPreempted
}

// preemptRemote decides whether the worker must stop a step, on a
// heartbeat that listed held (lost: those no longer its own).
func (ws *Workers) preemptRemote(ctx context.Context, workerID string, held, lost []store.Fence, load WorkerLoad) []Preemption {
	if !load.Full || len(held) == 0 {
		return nil
	}
	now := time.Now()
	ws.preempt.mu.Lock()
	st := ws.preempt.get(workerID)
	if st.cause != nil {
		if slices.Contains(held, st.fence) && !slices.Contains(lost, st.fence) {
			// Still stopping (or the reply was lost): ask again, nothing new.
			p := Preemption{Fence: st.fence, Reason: st.cause.Error()}
			ws.preempt.mu.Unlock()
			return []Preemption{p}
		}
		st.cause = nil
	}
	if now.Sub(st.lastPeek) < ws.e.cfg.HeartbeatInterval/2 {
		ws.preempt.mu.Unlock()
		return nil
	}
	st.lastPeek = now
	ws.preempt.mu.Unlock()

	steps, err := ws.e.store.HeldPreemptible(ctx, workerID, slices.DeleteFunc(slices.Clone(held), func(f store.Fence) bool {
		return slices.Contains(lost, f)
	}))
	if err != nil {
		if ctx.Err() == nil {
			ws.e.log.Warn("preemption: could not read the steps a worker holds", "worker_id", workerID, "error", err)
		}
		return nil
	}
	var victim *store.ClaimedStep
	handlers := slices.Clone(load.Handlers)
	for i := range steps {
		c := &steps[i]
		if betterVictim(c, victim) {
			victim = c
		}
		if len(load.Handlers) == 0 && !slices.Contains(handlers, c.Handler) {
			handlers = append(handlers, c.Handler) // it runs them, so it claims them
		}
	}
	// Never the engine's own handlers (ClaimRemote refuses them).
	handlers = slices.DeleteFunc(handlers, enginesOwn)
	if victim == nil || len(handlers) == 0 {
		return nil
	}
	cause := ws.e.preemptor(ctx, ws.e.claimParams(workerID, 1, handlers, load.Namespaces, 0), victim.Priority)
	if cause == nil {
		return nil
	}
	ws.preempt.mu.Lock()
	st = ws.preempt.get(workerID)
	if st.cause != nil {
		// A concurrent heartbeat of the same worker asked first.
		ws.preempt.mu.Unlock()
		return nil
	}
	st.fence, st.cause = victim.Fence, cause
	ws.preempt.mu.Unlock()
	ws.e.announcePreemption(victim, cause, workerID)
	return []Preemption{{Fence: victim.Fence, Reason: cause.Error()}}
}
