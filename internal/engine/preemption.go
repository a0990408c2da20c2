package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/weftrun/weft/internal/event"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// This file holds preemption. While every slot of the engine is busy and
// one of its handlers runs a preemptible step, the claim loop asks the
// store which step a claim would take first (store.PeekClaim: the claim's
// own query and policies, one row, nothing marked). When that step's
// priority is strictly higher than the lowest of the preemptible steps
// running, the engine cancels that step's context with an ErrPreempted
// cause. The handler's end is settled like any other (execute, then the
// completer): the step returns to ready keeping its checkpoint, its
// attempt given back, fenced by its lease, and the audit names the step
// that preempted it. A handler that ignores its context and returns a
// result anyway completes as usual. The freed slot claims the better step.
//
// An engine running no preemptible step does none of this: the claim loop
// checks a counter. With one, it peeks at most once per peekEvery, however
// often it is woken.

// ErrPreempted is the cause (context.Cause) with which the engine cancels
// the context of a preemptible step to make room for a step of higher
// priority.
var ErrPreempted = errors.New("preempted by a step of higher priority")

// peekEvery bounds how often the claim loop peeks at the claim (see
// maybePreempt).
const peekEvery = 100 * time.Millisecond

// preemptedBy is the cause of one preemption: ErrPreempted, naming the
// step that preempted.
type preemptedBy struct {
	taskID   int64
	step     string
	priority int
}

func (p *preemptedBy) Error() string {
	return fmt.Sprintf("preempted by task %d step %q (priority %d)", p.taskID, p.step, p.priority)
}

func (p *preemptedBy) Is(target error) bool { return target == ErrPreempted }

// maybePreempt preempts the lowest-priority preemptible step this engine
// runs if the step a claim would take first has a higher priority. The
// claim loop calls it when no slot is free.
func (x *executor) maybePreempt(ctx context.Context) {
	x.mu.Lock()
	if x.preemptible == 0 {
		x.mu.Unlock()
		return
	}
	now := time.Now()
	if now.Sub(x.lastPeek) < min(peekEvery, x.e.cfg.PollInterval) {
		x.mu.Unlock()
		return // the next wake-up or poll looks again
	}
	x.lastPeek = now
	var victim *running
	for _, r := range x.inflight {
		if r.preempted {
			// One at a time: the slot it frees is claimed first.
			x.mu.Unlock()
			return
		}
		if betterVictim(r.step, victim.claimed()) {
			victim = r
		}
	}
	x.mu.Unlock()
	if victim == nil {
		return
	}
	cause := x.e.preemptor(ctx, x.e.claimParams(x.e.ID(), 1, x.handlerNames(), nil, 0), victim.step.Priority)
	if cause == nil {
		return
	}
	x.mu.Lock()
	if r, ok := x.inflight[victim.fence.StepID]; !ok || r != victim || r.preempted {
		x.mu.Unlock()
		return
	}
	victim.preempted = true
	victim.cancel(cause)
	x.mu.Unlock()
	x.e.announcePreemption(victim.step, cause, "")
}

// claimed is the step r runs, nil for no r.
func (r *running) claimed() *store.ClaimedStep {
	if r == nil {
		return nil
	}
	return r.step
}

// betterVictim reports whether c is a better step to preempt than v (nil:
// none yet): c is preemptible and of lower priority, or of the same
// priority and claimed later (a higher id), so that every engine picks the
// same victim among the same steps.
func betterVictim(c, v *store.ClaimedStep) bool {
	return c.Preemptible && (v == nil || c.Priority < v.Priority || (c.Priority == v.Priority && c.ID > v.ID))
}

// preemptor decides one preemption, for the engine's own steps and for a
// remote worker's alike: it peeks at the step a claim with p would take
// first and returns the cause with which to stop a preemptible step of
// priority victim, or nil when that step is not strictly more urgent (or
// there is none). A failed peek is logged and preempts nothing.
func (e *Engine) preemptor(ctx context.Context, p store.ClaimParams, victim int) *preemptedBy {
	top, err := e.store.PeekClaim(ctx, p)
	if err != nil {
		if ctx.Err() == nil {
			e.log.Warn("preemption: could not look for a step of higher priority", "error", err)
		}
		return nil
	}
	if top == nil || top.Priority <= victim {
		return nil
	}
	return &preemptedBy{taskID: top.TaskID, step: top.Name, priority: top.Priority}
}

// announcePreemption logs and publishes the preemption of c (by a remote
// worker when worker is set).
func (e *Engine) announcePreemption(c *store.ClaimedStep, by *preemptedBy, worker string) {
	args := []any{"task_id", c.TaskID, "step", c.Name, "attempt", c.Fence.Attempt, "priority", c.Priority,
		"by_task_id", by.taskID, "by_step", by.step, "by_priority", by.priority}
	if worker != "" {
		args = append(args, "worker_id", worker)
	}
	e.log.Info("step preempted", args...)
	e.events.Publish(event.Event{Kind: event.Preempted, Namespace: c.Namespace, Workflow: c.Workflow, TaskID: c.TaskID, Step: c.Name,
		Handler: c.Handler, Attempt: c.Fence.Attempt, Remote: worker != ""})
}

// preempted is the outcome of an attempt stopped by preemption: the step
// returns to ready now, its checkpoint kept and its attempt given back.
func preempted(o store.Outcome, log *stepLog, cause error) store.Outcome {
	o.State, o.Snooze, o.Reason = state.StepReady, true, cause.Error()
	log.Info("step returned to the queue", "reason", o.Reason)
	return storable(o)
}
