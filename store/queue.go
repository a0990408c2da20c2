package store

import (
	"encoding/json"
	"math/rand/v2"
	"time"

	"github.com/weftrun/weft/state"
)

// Fence identifies one attempt's hold on a step. A write guarded by a fence
// succeeds only while the step is running under exactly this attempt and
// lease.
type Fence struct {
	StepID  int64
	Attempt int
	LeaseID int64
}

// ClaimParams says what an engine may claim.
type ClaimParams struct {
	EngineID string
	Limit    int
	// Now overrides the store's clock; zero means the time at which the
	// claim transaction holds the write lock, so that a claim never appears
	// to start before an outcome it depends on was recorded.
	Now time.Time
	// Handlers limits the claim to steps run by these handlers; nil means
	// any.
	Handlers []string
	// Namespaces limits the claim to steps of these namespaces; nil means
	// any.
	Namespaces []string
	// Caps limits how many steps of a namespace run at once across every
	// engine on the database.
	Caps map[string]int
	// TaskID limits the claim to the steps of one task and of the child
	// tasks below it; 0 means any task.
	TaskID int64
	// LeaseID is the lease the claimed steps are held under (NewLeaseID);
	// 0 lets the store choose. An engine chooses it so it can release the
	// claim with ReleaseLease if the claim's outcome is unknown.
	LeaseID int64
	// Deferred, if set, is called after a claim commits with the steps it
	// deferred for want of rate-limit tokens, by bucket.
	Deferred func([]RateDeferral)
	// Held, if set, is called after a claim commits that left ready steps
	// because a concurrency limit was full: room freed under it, by an
	// outcome in another process, is announced by nothing, so the claimer
	// should look again soon.
	Held func()
}

// ClaimedStep is a step claimed for execution with what its handler sees.
type ClaimedStep struct {
	Step
	Fence    Fence
	Workflow string
	Version  string
	Input    json.RawMessage            // the task input
	Deps     map[string]json.RawMessage // results of dependencies by name
	// TraceParent is the W3C traceparent stored with the task ("": none),
	// TraceState its tracestate ("": none).
	TraceParent string
	TraceState  string
	// ReadyAt is when the step became ready to claim (zero when the store
	// does not say); its claim time minus ReadyAt is its queue wait.
	ReadyAt time.Time
}

// Outcome is the result of one attempt, to record with CompleteSteps.
type Outcome struct {
	Fence    Fence
	EngineID string
	// State is StepCompleted, StepFailed (permanent) or StepWaiting (a retry
	// or snooze at RunAt); StepReady with Snooze is a preempted attempt,
	// back to ready at once with its attempt given back and its checkpoint
	// kept (Reason names the preemptor for the audit).
	State  state.Step
	Result json.RawMessage
	Error  string
	RunAt  time.Time
	// Snooze gives the attempt back: the next run has the same number.
	Snooze bool
	Reason string
	// Decide marks the completion of a KindDecision step: of its direct
	// children, those named in Branches run and the others are skipped,
	// in the same transaction.
	Decide   bool
	Branches []string
	// Spawn, on the completion of a KindBatch step, creates its items in
	// the same transaction.
	Spawn *Spawn
	// Child, with State StepWaiting, starts a child task in the same
	// transaction and makes the step wait for it (a KindWorkflow step);
	// the child's end decides what comes next (a failed child is reported
	// by a run under the same attempt number). A start past the limits
	// fails the step instead.
	Child *ChildStart
	// ChildConsumed marks the outcome of an attempt that reported a child's
	// failure (Step.ChildError): it clears the error.
	ChildConsumed bool
	// BeginWait, with State StepWaiting, begins a KindSignal step's wait
	// for its signal: the step holds no claim and gets its attempt back,
	// its deadline is its signal timeout from now, and a signal its task
	// kept completes it at once.
	BeginWait bool
	// Calls, with State StepWaiting, makes a KindFunction step wait for new
	// steps of its task, one per call its function made (KindCall,
	// KindSignal or KindWorkflow, each with the function step as its only
	// child), created in the same transaction. The function step gives its
	// attempt back and runs again once every call it waits for has ended,
	// however they ended.
	Calls []StepInsert
	// Resume, with State StepCompleted on a call's step, records in the
	// same transaction what its durable function did next, where the
	// call's end makes the function step ready: the step waits for the
	// new calls (as Calls does) instead of being claimed and run again.
	Resume *Resume
}

// Resume is what a durable function did next after the call whose
// outcome carries it, replayed by the engine that ran the call over the
// calls it knows its task recorded: new calls, which its step waits for,
// or, with Returned, its result, with which its step completes (a run of
// it under the call's claim). It is ignored, and the function step made
// ready as usual, unless the task still holds exactly those calls:
// Recorded steps besides its function step, Succeeded of them succeeded
// (the call included), and the call's end makes the function step ready.
type Resume struct {
	StepID    int64 // the function step
	Calls     []StepInsert
	Reason    string
	Recorded  int
	Succeeded int
	Returned  bool
	Result    json.RawMessage
}

// Spawn describes the items a batch step creates: one step per item, run
// by the template, named "<batch step>[<n>]", ready at once. The batch
// step's children wait for every item as well.
type Spawn struct {
	// Template is the step template the items run: its Name (the
	// template's name), Handler, MaxAttempts, Priority, TTL and Timeout
	// are used.
	Template StepInsert
	// Items are the batch items, one JSON value each.
	Items []json.RawMessage
	// MaxSteps bounds the steps of the task, items included; a batch that
	// would exceed it fails instead. 0 means no bound.
	MaxSteps int
}

// NewLeaseID draws a lease id: random, so that a claim's lease names it
// alone, and positive (0 asks the store to choose).
func NewLeaseID() int64 { return rand.Int64N(1<<62) + 1 }
