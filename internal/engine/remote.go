package engine

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/weftrun/weft/internal/durable"
	"slices"
	"sync"
	"time"

	"github.com/weftrun/weft/internal/event"
	"github.com/weftrun/weft/internal/outcome"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/workflow"
)

// This file runs steps on remote workers through the same lifecycle as the
// engine's own handlers: a remote claim goes through the engine's claim
// path (with its caps and conditions), a remote result or failure becomes
// an outcome through settle, and is written by the completer in the same
// batches. A remote worker is recorded in the store as an engine of its
// own: its claims are leased to it, its heartbeats extend them and list the
// steps it holds, and when it stops heartbeating the reaper returns its
// steps to the queue. The engine keeps no state about workers, so any
// number of servers on one database serve the same workers.

// Workers serves the remote workers of an engine: their registration,
// claims, heartbeats and reports. It remembers only what saves statements
// (the owners of worker ids already checked, the preemptions in flight).
type Workers struct {
	e *Engine
	// owners remembers the owner of worker ids already checked.
	owners workerOwners
	// preempt remembers the preemption of each remote worker
	// (remote_preemption.go).
	preempt workerPreemptions
}

// WorkerClaim is what a remote worker asks to claim.
type WorkerClaim struct {
	// Handlers are the handler names the worker runs (at least one).
	Handlers []string
	// Namespaces limits the claim to these namespaces; nil means any.
	Namespaces []string
	// Max is how many steps the worker takes at most.
	Max int
	// Wait is how long to wait for work when none is ready.
	Wait time.Duration
}

// RemoteStep is a step claimed by a remote worker, with what its handler
// needs from the step's definition.
type RemoteStep struct {
	store.ClaimedStep
	Config json.RawMessage
	// Timeout bounds the attempt (zero: none). The worker should stop at
	// Deadline; the engine fails the step under its retry policy if it has
	// not heard by then.
	Timeout  time.Duration
	Deadline time.Time
	// Calls, for a durable function's step (Kind store.KindFunction or
	// store.KindCall), are the calls its task recorded, in order.
	Calls []durable.Recorded
}

// Failure is how a remote worker reports a failed attempt.
type Failure struct {
	Message string
	// Permanent fails the step at once, without retrying.
	Permanent bool
	// RetryAfter asks for the next attempt after this delay instead of the
	// policy's backoff (the policy's max attempts still applies).
	RetryAfter time.Duration
	// Preempted reports that the worker stopped the step because a
	// heartbeat's reply asked it to (WorkerHeartbeatLoad): the step returns
	// to ready with its checkpoint, its attempt given back. Message is the
	// reason the reply gave.
	Preempted bool
	// Snooze runs the step again after this delay with its attempt given
	// back: it is not done yet, and that is no failure.
	Snooze time.Duration
}

// err returns the failure as the error a handler would have returned.
func (f Failure) err() error {
	err := errors.New(f.Message)
	switch {
	case f.Permanent:
		return &outcome.PermanentError{Err: err}
	case f.RetryAfter > 0:
		return &outcome.RetryAfterError{Err: err, Delay: f.RetryAfter}
	case f.Snooze > 0:
		return &outcome.SnoozeError{Delay: f.Snooze, Reason: f.Message}
	}
	return err
}

// RegisterWorker records a new remote worker owned by owner (the principal
// of the credential that registers it) and returns its id. Every later
// call about the worker must come from the same owner (see checkWorker).
func (ws *Workers) RegisterWorker(ctx context.Context, name, owner string, handlers ...string) (string, error) {
	if owner == "" {
		return "", fmt.Errorf("%w worker %s: an owner is required", store.ErrInvalid, name)
	}
	var b [6]byte
	_, _ = crand.Read(b[:])
	id := "remote-" + name + "-" + hex.EncodeToString(b[:])
	if err := ws.e.store.RegisterEngine(ctx, store.EngineInfo{ID: id, Host: "remote worker " + name, StartedAt: time.Now(),
		Worker: true, Owner: owner, Handlers: handlers}); err != nil {
		return "", fmt.Errorf("register worker %s: %w", name, err)
	}
	ws.owners.remember(id, owner)
	ws.e.log.Info("remote worker registered", "worker_id", id, "owner", owner)
	return id, nil
}

// workerOwners remembers the owner of each worker id the engine has
// checked: a worker's id never changes owner, so its steady stream of
// claims, heartbeats and reports costs no read of its engine row. It holds
// at most maxRemembered ids and forgets them all when full.
type workerOwners struct {
	mu sync.Mutex
	m  map[string]string
}

const maxRemembered = 4096

func (w *workerOwners) owns(id, owner string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	o, ok := w.m[id]
	return ok && o == owner
}

func (w *workerOwners) remember(id, owner string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil || len(w.m) >= maxRemembered {
		w.m = map[string]string{}
	}
	w.m[id] = owner
}

// checkWorker makes sure that workerID is a remote worker registered by
// owner. An unknown id, the id of an engine (this one included) and a
// worker of another owner are all store.ErrNotFound with the same message,
// so that a caller learns nothing about ids that are not its own. A worker
// registered before owners were recorded gets store.ErrEngineLost: it
// registers again, under its credential.
func (ws *Workers) checkWorker(ctx context.Context, workerID, owner string) error {
	if ws.owners.owns(workerID, owner) {
		return nil
	}
	w, err := ws.e.store.GetEngine(ctx, workerID)
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return fmt.Errorf("worker %s: %w", workerID, err)
	case !w.Worker:
	case w.Owner == "":
		return fmt.Errorf("worker %s has no recorded owner: %w", workerID, store.ErrEngineLost)
	case w.Owner == owner:
		ws.owners.remember(workerID, owner)
		return nil
	}
	return fmt.Errorf("no worker %s registered by this credential: %w", workerID, store.ErrNotFound)
}

// StopWorker marks a remote worker stopped: the steps it still holds are
// reclaimed at once.
func (ws *Workers) StopWorker(ctx context.Context, workerID, owner string) error {
	if err := ws.checkWorker(ctx, workerID, owner); err != nil {
		return err
	}
	if err := ws.e.store.StopEngine(ctx, workerID); err != nil {
		return fmt.Errorf("stop worker %s: %w", workerID, err)
	}
	// What it still held goes back to the queue now, not at the leader's
	// next full reap.
	n, err := ws.e.store.Reap(ctx, time.Now(), time.Time{}, []string{workerID}, ws.e.ID())
	if err != nil {
		return fmt.Errorf("reclaim the steps of worker %s: %w", workerID, err)
	}
	ws.e.log.Info("remote worker stopped", "worker_id", workerID, "reclaimed", n)
	if n > 0 {
		ws.e.events.Publish(event.Event{Kind: event.LeaseExpired, Count: n})
	}
	return nil
}

// enginesOwn reports whether h is a built-in handler that only the engine
// runs (workflow.EngineStepType).
func enginesOwn(h string) bool {
	_, ok := workflow.EngineStepType(h)
	return ok
}

// Stopping reports whether the engine's Stop has begun (ClaimRemote then
// hands out nothing).
func (ws *Workers) Stopping() bool { return ws.e.isDraining() }

// ClaimRemote claims up to req.Max ready steps for a remote worker, waiting
// up to req.Wait for work when none is ready. The claim goes through the
// engine's claim path, so namespace caps and every claim policy hold for
// remote steps as for local ones; a step whose condition is false is
// skipped here and never handed out. The claim renews the worker's lease,
// and a worker declared dead gets store.ErrEngineLost.
func (ws *Workers) ClaimRemote(ctx context.Context, workerID, owner string, req WorkerClaim) ([]RemoteStep, error) {
	if i := slices.IndexFunc(req.Handlers, enginesOwn); i >= 0 {
		// The engine's own: they start child tasks and signal waits,
		// which no worker can.
		return nil, fmt.Errorf("claim: %w", store.Invalidf(fmt.Sprintf("handlers[%d]", i), "%q is the engine's, for workflow and signal steps", req.Handlers[i]))
	}
	if ws.e.isDraining() {
		// The server is shutting down: no new work, and no wait that
		// would hold its shutdown open.
		return nil, nil
	}
	if err := ws.checkWorker(ctx, workerID, owner); err != nil {
		return nil, err
	}
	if err := ws.renew(ctx, workerID); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(req.Wait)
	fallback := time.NewTimer(0)
	defer fallback.Stop()
	beat := time.Now()
	for {
		// A worker waiting in a claim is alive: renew its lease while it
		// waits, as its own heartbeats would.
		if time.Since(beat) >= ws.e.cfg.HeartbeatInterval {
			if err := ws.renew(ctx, workerID); err != nil {
				return nil, err
			}
			beat = time.Now()
		}
		woken := ws.e.ready.C()
		if err := ws.e.monitor.DatabaseGone(); err != nil {
			return nil, fmt.Errorf("claim for worker %s: %w", workerID, err)
		}
		lease := store.NewLeaseID()
		claimed, err := ws.e.store.ClaimSteps(ctx, ws.e.claimParams(workerID, req.Max, req.Handlers, req.Namespaces, lease))
		if err != nil {
			if !errors.Is(err, store.ErrEngineLost) {
				ws.release(workerID, lease)
			}
			return nil, fmt.Errorf("claim for worker %s: %w", workerID, err)
		}
		if len(claimed) > 0 {
			out, err := ws.prepareRemote(ctx, workerID, claimed)
			if err != nil || ctx.Err() != nil {
				// The worker will never see these steps: give them back now
				// rather than when its lease lapses.
				ws.release(workerID, lease)
				return nil, errors.Join(err, ctx.Err())
			}
			if len(out) > 0 {
				return out, nil
			}
			continue // every step claimed was skipped by its condition
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil, nil
		}
		fallback.Reset(min(left, ws.e.cfg.PollInterval, ws.e.cfg.HeartbeatInterval))
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-ws.e.draining:
			return nil, nil
		case <-woken:
		case <-fallback.C:
		}
	}
}

// renew extends a worker's lease without reporting on its steps.
func (ws *Workers) renew(ctx context.Context, workerID string) error {
	if _, err := ws.e.store.Heartbeat(ctx, store.HeartbeatParams{EngineID: workerID, Now: time.Now()}); err != nil {
		return fmt.Errorf("worker %s: %w", workerID, err)
	}
	return nil
}

// prepareRemote adds to claimed steps what their worker needs from their
// definitions, and settles at once the steps that must not run (a false
// condition, a definition that is gone). It returns the steps to hand out.
func (ws *Workers) prepareRemote(ctx context.Context, workerID string, claimed []store.ClaimedStep) ([]RemoteStep, error) {
	out := make([]RemoteStep, 0, len(claimed))
	now := time.Now()
	for _, c := range claimed {
		ws.e.publishClaimed(c, true)
		log := &stepLog{logger: ws.e.log, c: &c, took: -1, remote: workerID, trace: traceID(c.TraceParent)}
		o := store.Outcome{Fence: c.Fence, EngineID: workerID}
		_, def, err := ws.e.defs.claimedDefinition(ctx, c)
		if err != nil {
			if !errors.Is(err, store.ErrNotFound) {
				return nil, err // a passing database error: the claim is released
			}
			o = ws.e.defs.undefined(o, log, err)
		} else if skip, ok := ws.e.defs.gate(&o, log, def, c); !ok {
			o = skip
		} else if sleepEnds(c) {
			o = ws.e.defs.settle(o, log, nil, def, c.Attempts, nil, nil)
		} else {
			r := RemoteStep{ClaimedStep: c, Config: def.Config, Timeout: time.Duration(def.Timeout)}
			if c.Kind == store.KindFunction || c.Kind == store.KindCall {
				if r.Calls, err = ws.e.funcs.journal(ctx, c.TaskID); err != nil {
					return nil, err
				}
			}
			r.TraceParent = ws.e.tracer.attemptTraceParent(&c)
			if r.Timeout > 0 {
				r.Deadline = now.Add(r.Timeout)
			}
			out = append(out, r)
			continue
		}
		// It must not run: settled here, never handed out.
		if err := ws.e.completer.record(ctx, o); err != nil {
			return nil, err
		}
		ws.e.publishEnded(c, o, true, 0, true, nil)
	}
	return out, nil
}

// release returns the steps of a claim its worker will not get.
func (ws *Workers) release(workerID string, lease int64) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if n, err := ws.e.store.ReleaseLease(ctx, workerID, lease); err != nil {
		ws.e.log.Error("release an undelivered claim", "worker_id", workerID, "error", err)
	} else if n > 0 {
		ws.e.log.Warn("released steps of an undelivered claim", "worker_id", workerID, "count", n)
	}
}

// releasePeriods is how many heartbeat intervals a worker's claim is
// given to reach it before a heartbeat that leaves it out releases it.
const releasePeriods = 2

// WorkerHeartbeat renews a worker's lease. held must list every step the
// worker holds: a step it holds in the store but does not list, claimed
// more than two heartbeat intervals ago, never reached it (the reply to
// its claim was lost) or was forgotten, and is released for another
// claim. A younger claim may still be on its way: the claim's reply and
// the heartbeat that crosses it may each take most of an interval on a
// loaded host (releasePeriods). It returns the listed
// fences that are no longer valid (cancelled or taken over): the worker
// must stop them.
func (ws *Workers) WorkerHeartbeat(ctx context.Context, workerID, owner string, held []store.Fence) ([]store.Fence, error) {
	lost, _, err := ws.WorkerHeartbeatLoad(ctx, workerID, owner, held, WorkerLoad{})
	return lost, err
}

// WorkerHeartbeatLoad is WorkerHeartbeat with what the worker tells about
// its slots: when it is full, it also returns the steps the worker must
// stop to make room for more urgent work (remote_preemption.go).
func (ws *Workers) WorkerHeartbeatLoad(ctx context.Context, workerID, owner string, held []store.Fence, load WorkerLoad) ([]store.Fence, []Preemption, error) {
	if err := ws.checkWorker(ctx, workerID, owner); err != nil {
		return nil, nil, err
	}
	now := time.Now()
	res, err := ws.e.store.Heartbeat(ctx, store.HeartbeatParams{EngineID: workerID, Now: now, Held: held,
		Complete: true, ClaimedBefore: now.Add(-releasePeriods * ws.e.cfg.HeartbeatInterval)})
	if err != nil {
		return nil, nil, fmt.Errorf("heartbeat of worker %s: %w", workerID, err)
	}
	if res.Released > 0 {
		ws.e.log.Warn("released steps a worker does not hold", "worker_id", workerID, "count", res.Released)
	}
	return res.Lost, ws.preemptRemote(ctx, workerID, held, res.Lost, load), nil
}

// held loads the step a worker reports on, checking that the worker is
// owner's and holds it under exactly that fence.
func (ws *Workers) held(ctx context.Context, workerID, owner string, f store.Fence) (store.ClaimedStep, error) {
	if err := ws.checkWorker(ctx, workerID, owner); err != nil {
		return store.ClaimedStep{}, err
	}
	c, err := ws.e.store.HeldStep(ctx, workerID, f)
	if err != nil {
		return store.ClaimedStep{}, fmt.Errorf("step %d attempt %d of worker %s: %w", f.StepID, f.Attempt, workerID, err)
	}
	return *c, nil
}

// CompleteRemote records the result of a remote worker's attempt ("" means
// null) exactly as for the engine's own handlers: a decision's or a
// batch's result makes its decision or its items, and a result that does
// not fit the step's type fails it for good. It returns the outcome
// recorded; a step the worker no longer holds is store.ErrStaleLease.
func (ws *Workers) CompleteRemote(ctx context.Context, workerID, owner string, f store.Fence, result json.RawMessage) (store.Outcome, error) {
	if len(result) > 0 && !json.Valid(result) {
		return store.Outcome{}, fmt.Errorf("%w result: not valid JSON", store.ErrInvalid)
	}
	return ws.reportRemote(ctx, workerID, owner, f, result, nil)
}

// FailRemote records a remote worker's failed attempt under the step's
// retry policy, exactly as for the engine's own handlers.
func (ws *Workers) FailRemote(ctx context.Context, workerID, owner string, f store.Fence, fl Failure) (store.Outcome, error) {
	if fl.Message == "" {
		return store.Outcome{}, fmt.Errorf("%w failure: a message is required", store.ErrInvalid)
	}
	if fl.Preempted {
		// The worker's before its preemption's cause is taken.
		if err := ws.checkWorker(ctx, workerID, owner); err != nil {
			return store.Outcome{}, err
		}
		return ws.reportRemote(ctx, workerID, owner, f, nil, ws.preemptionCause(workerID, f, fl.Message))
	}
	return ws.reportRemote(ctx, workerID, owner, f, nil, fl.err())
}

func (ws *Workers) reportRemote(ctx context.Context, workerID, owner string, f store.Fence, result json.RawMessage, failed error) (store.Outcome, error) {
	c, err := ws.held(ctx, workerID, owner, f)
	if err != nil {
		return store.Outcome{}, err
	}
	return ws.reportHeld(ctx, workerID, c, result, failed)
}

// reportHeld records the outcome of held step c's attempt on a remote
// worker.
func (ws *Workers) reportHeld(ctx context.Context, workerID string, c store.ClaimedStep, result json.RawMessage, failed error) (store.Outcome, error) {
	log := &stepLog{logger: ws.e.log, c: &c, took: -1, remote: workerID, trace: traceID(c.TraceParent)}
	var took time.Duration
	if c.StartedAt != nil {
		took = time.Since(*c.StartedAt)
		log.took = took
	}
	o := store.Outcome{Fence: c.Fence, EngineID: workerID}
	w, def, err := ws.e.defs.claimedDefinition(ctx, c)
	if err != nil {
		if !errors.Is(err, store.ErrNotFound) {
			return store.Outcome{}, err // a passing database error: the worker retries its report
		}
		o = ws.e.defs.undefined(o, log, err)
	} else if errors.Is(failed, ErrPreempted) {
		if !c.Preemptible {
			return store.Outcome{}, fmt.Errorf("failure: %w", store.Invalidf("preempted", "step %q is not preemptible", c.Name))
		}
		o = preempted(o, log, failed)
	} else {
		o = ws.e.defs.settle(o, log, w, def, c.Attempts, result, failed)
	}
	// The attempt's span runs from the claim to now: the engine keeps
	// nothing about a remote step between the worker's calls.
	_, span := ws.e.tracer.attemptContext(ctx, &c, workerID)
	if err := ws.e.completer.record(ctx, o); err != nil {
		if span != nil {
			span.End()
		}
		return store.Outcome{}, err
	}
	endAttempt(span, o, true)
	ws.e.publishEnded(c, o, true, took, true, span)
	return o, nil
}

// CheckpointRemote saves a checkpoint for a step a remote worker holds.
func (ws *Workers) CheckpointRemote(ctx context.Context, workerID, owner string, f store.Fence, cp json.RawMessage) error {
	if _, err := ws.held(ctx, workerID, owner, f); err != nil {
		return err
	}
	return ws.e.checkpoint(ctx, f, cp)
}

// ProgressRemote saves the progress of a step a remote worker holds.
func (ws *Workers) ProgressRemote(ctx context.Context, workerID, owner string, f store.Fence, fraction float64, message string) error {
	if _, err := ws.held(ctx, workerID, owner, f); err != nil {
		return err
	}
	return ws.e.progress(ctx, f, fraction, message)
}

// LeaseTTL returns how long after its last heartbeat an engine, or a remote
// worker recorded as one, is presumed dead and its steps reclaimed.
func (ws *Workers) LeaseTTL() time.Duration { return ws.e.cfg.LeaseTTL }

// HeartbeatInterval returns how often the engine renews its leases, and how
// often a remote worker should send its heartbeat.
func (ws *Workers) HeartbeatInterval() time.Duration { return ws.e.cfg.HeartbeatInterval }
