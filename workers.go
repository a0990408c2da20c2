package weft

import (
	"context"
	"encoding/json"
	"github.com/weftrun/weft/internal/durable"
	"time"

	"github.com/weftrun/weft/internal/engine"
	"github.com/weftrun/weft/store"
)

// Workers is the engine's side of the remote-worker protocol. A transport
// (the REST server's /v1/workers routes) translates each request into one
// of these calls; the step lifecycle behind them is the engine's own, the
// same as for its Go handlers: claims honour the namespace caps and every
// claim policy, results and failures are settled under the step's retry
// policy and written in the completer's batches, and timeouts are enforced
// by the engine.
//
// A worker belongs to its owner: the principal (an API key, a token's
// subject) of the credential that registered it, which a transport passes
// to every call. A call about a worker that is not owner's (another
// owner's, an unknown id, or an engine's id) fails with an error wrapping
// store.ErrNotFound, the same in each case.
type Workers struct{ core *engine.Engine }

// Workers returns the engine's side of the remote-worker protocol.
func (e *Engine) Workers() *Workers { return &Workers{core: e.core} }

// Fence identifies one attempt's hold on a step: every report about the
// step carries it back.
type Fence = store.Fence

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
	// Timeout bounds the attempt (zero: none): the worker should give up at
	// Deadline, and the engine fails the step under its retry policy soon
	// after if it has not heard by then.
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
	// heartbeat's reply asked it to (HeartbeatLoad): the step returns to
	// ready keeping its checkpoint, its attempt given back, and the audit
	// names the step that preempted it. Message is the reason the reply
	// gave. Only a preemptible step may be reported so.
	Preempted bool
	// Snooze runs the step again after this delay with its attempt given
	// back (as Snooze does for a local handler): it is not done yet, and
	// that is no failure. Message says why.
	Snooze time.Duration
}

// WorkerLoad is what a worker's heartbeat tells about its slots: Full says
// every slot is busy (a worker that never says so is never preempted);
// Handlers and Namespaces are its claim predicates, as in its claims, with
// which the engine looks for more urgent work it would claim (no Handlers:
// the handlers of the preemptible steps it holds; no Namespaces: any).
type WorkerLoad = engine.WorkerLoad

// Preemption asks a worker to stop the step it holds under Fence, and to
// report it with Failure.Preempted; Reason reads `preempted by task N step
// "X" (priority P)`.
type Preemption = engine.Preemption

// Recorded is what the engine recorded for a worker's report: the state the
// step moved to and, for a retry or snooze, when it runs again.
type Recorded = store.Outcome

// Register records a new remote worker owned by owner, serving handlers
// (listed by `weft workers` and the attention list), and returns its id.
func (w *Workers) Register(ctx context.Context, name, owner string, handlers ...string) (string, error) {
	return w.core.Workers().RegisterWorker(ctx, name, owner, handlers...)
}

// Stop marks a remote worker stopped: the steps it holds are reclaimed at
// once.
func (w *Workers) Stop(ctx context.Context, workerID, owner string) error {
	return w.core.Workers().StopWorker(ctx, workerID, owner)
}

// Claim claims up to req.Max ready steps for a worker, waiting up to
// req.Wait when none is ready. A worker declared dead gets an error wrapping
// store.ErrEngineLost and must register again.
func (w *Workers) Claim(ctx context.Context, workerID, owner string, req WorkerClaim) ([]RemoteStep, error) {
	steps, err := w.core.Workers().ClaimRemote(ctx, workerID, owner, engine.WorkerClaim(req))
	if err != nil {
		return nil, err
	}
	out := make([]RemoteStep, len(steps))
	for i, s := range steps {
		out[i] = RemoteStep(s)
	}
	return out, nil
}

// Stopping reports whether the engine's Stop has begun: from then on Claim
// returns no steps, at once. A transport that holds a worker's stream open
// ends it then, so that the worker goes to another server.
func (w *Workers) Stopping() bool { return w.core.Workers().Stopping() }

// Heartbeat renews a worker's lease. held must list every step the worker
// holds: a step it holds in the store but does not list, claimed more than a
// heartbeat interval ago, never reached it and is released for another
// claim. It returns the listed fences that are no longer valid: the worker
// must stop those steps.
func (w *Workers) Heartbeat(ctx context.Context, workerID, owner string, held []Fence) ([]Fence, error) {
	return w.core.Workers().WorkerHeartbeat(ctx, workerID, owner, held)
}

// HeartbeatLoad is Heartbeat with what the worker tells about its slots.
// When it is full, holds a preemptible step, and the step it would claim
// next has a strictly higher priority than the lowest-priority preemptible
// step it holds, the engine asks it to stop that step (at most one at a
// time per worker): the worker stops it and reports it with
// Failure.Preempted.
func (w *Workers) HeartbeatLoad(ctx context.Context, workerID, owner string, held []Fence, load WorkerLoad) ([]Fence, []Preemption, error) {
	return w.core.Workers().WorkerHeartbeatLoad(ctx, workerID, owner, held, load)
}

// Complete records a worker's result for a step it holds (nil means null).
func (w *Workers) Complete(ctx context.Context, workerID, owner string, f Fence, result json.RawMessage) (Recorded, error) {
	return w.core.Workers().CompleteRemote(ctx, workerID, owner, f, result)
}

// Fail records a worker's failed attempt under the step's retry policy.
func (w *Workers) Fail(ctx context.Context, workerID, owner string, f Fence, fl Failure) (Recorded, error) {
	return w.core.Workers().FailRemote(ctx, workerID, owner, f, engine.Failure(fl))
}

// FunctionCall is a new call that a remote worker's run of a durable
// function made; RecordedCall one its task recorded (RemoteStep.Calls).
type (
	FunctionCall = engine.FunctionCall
	RecordedCall = durable.Recorded
)

// Calls records the new calls that a worker's run of a durable function's
// function step made: the step waits for them, holding no slot, and is
// claimed again once they have all ended. A call that is not valid is
// refused with an error wrapping ErrInvalid that names its field
// (calls[i].name, …).
func (w *Workers) Calls(ctx context.Context, workerID, owner string, f Fence, calls []FunctionCall) (Recorded, error) {
	return w.core.Workers().CallsRemote(ctx, workerID, owner, f, calls)
}

// Checkpoint saves a checkpoint for a step the worker holds.
func (w *Workers) Checkpoint(ctx context.Context, workerID, owner string, f Fence, cp json.RawMessage) error {
	return w.core.Workers().CheckpointRemote(ctx, workerID, owner, f, cp)
}

// Progress saves the progress (0 to 1, and a message) of a step the worker
// holds.
func (w *Workers) Progress(ctx context.Context, workerID, owner string, f Fence, fraction float64, message string) error {
	return w.core.Workers().ProgressRemote(ctx, workerID, owner, f, fraction, message)
}

// LeaseTTL is how long after its last heartbeat a worker is presumed dead
// and its steps reclaimed.
func (w *Workers) LeaseTTL() time.Duration { return w.core.Workers().LeaseTTL() }

// HeartbeatInterval is how often a worker should send its heartbeat.
func (w *Workers) HeartbeatInterval() time.Duration { return w.core.Workers().HeartbeatInterval() }
