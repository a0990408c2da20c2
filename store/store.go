// Package store defines the interface between the weft engine and a
// database, and the records that cross it. The database is the single source
// of truth: every task, step, lease and audit entry lives behind a Store.
//
// A Store decides the readiness of a finished step's children in the same
// transaction that records the outcome, guards every write to a claimed step
// with its fencing token, and appends every state transition to the audit log.
// Backends live in sub-packages (store/sqlite); the behaviour they share is
// checked by store/storetest.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/weftrun/weft/state"
)

// Errors a Store returns. Backends wrap them with context; test with
// errors.Is.
var (
	// ErrNotFound: no task, step or workflow with that identity.
	ErrNotFound = errors.New("not found")
	// ErrStaleLease: the fencing token no longer matches, the step was
	// taken over, cancelled or already finished. The write was refused.
	ErrStaleLease = errors.New("stale lease: the step is no longer held by this attempt")
	// ErrConflict: the change does not fit the current state (retrying a
	// task that has not failed, redefining a registered workflow version).
	ErrConflict = errors.New("conflict")
	// ErrEngineLost: the engine was declared dead by the reaper; it must
	// drop its in-flight work and register again.
	ErrEngineLost = errors.New("engine was declared dead by the reaper")
)

// Store is the only way the engine reaches the database.
type Store interface {
	// PutWorkflow registers a workflow version. Registering the identical
	// definition again is a no-op; a different definition under an existing
	// version is ErrConflict.
	PutWorkflow(ctx context.Context, w WorkflowRecord) error
	// GetWorkflow returns one version, or the newest registered one when
	// version is "".
	GetWorkflow(ctx context.Context, namespace, name, version string) (*WorkflowRecord, error)
	ListWorkflows(ctx context.Context) ([]WorkflowRecord, error)

	// InsertTasks submits tasks in one transaction. A task whose
	// idempotency key exists in its namespace is not inserted again: its
	// result carries the existing task and Duplicate set.
	InsertTasks(ctx context.Context, tasks []TaskInsert) ([]InsertResult, error)
	// GetTask returns a task with its steps.
	GetTask(ctx context.Context, id int64) (*Task, error)
	// ListTasks returns tasks without their steps, newest first.
	ListTasks(ctx context.Context, f TaskFilter) ([]Task, error)
	// CancelTask cancels a task and every non-terminal step. It returns the
	// fences of the steps that were running, whose handlers must stop.
	CancelTask(ctx context.Context, id int64, engineID, reason string) ([]Fence, error)
	// RetryTask moves a failed task back to running: its failed and expired
	// steps become ready with fresh attempts and the steps skipped because
	// of them are evaluated again.
	RetryTask(ctx context.Context, id int64, engineID string) error
	// Audit returns a task's transitions, oldest first.
	Audit(ctx context.Context, taskID int64) ([]AuditEntry, error)

	// ClaimSteps marks up to p.Limit ready steps running under a new lease
	// for p.EngineID, best effective priority first, honouring the
	// namespace caps, and returns them with their execution context. An
	// engine that is registered but no longer live gets ErrEngineLost.
	ClaimSteps(ctx context.Context, p ClaimParams) ([]ClaimedStep, error)
	// ReleaseLease returns to ready the steps still running under one
	// claim's lease, giving their attempt back. An engine calls it when a
	// claim failed in a way that may still have committed (the reply was
	// lost), so that steps it never started are not held forever. It
	// returns how many steps it released.
	ReleaseLease(ctx context.Context, engineID string, leaseID int64) (int, error)
	// CompleteSteps records outcomes in one transaction, each guarded by
	// its fence, decides the readiness of children and finishes tasks. The
	// result has one entry per outcome: nil or an error wrapping
	// ErrStaleLease.
	CompleteSteps(ctx context.Context, outcomes []Outcome) ([]error, error)
	// SaveCheckpoint stores a running step's checkpoint (fenced).
	SaveCheckpoint(ctx context.Context, f Fence, checkpoint json.RawMessage) error
	// SetDeferred sets or clears the deferred sub-status of a running step
	// (fenced).
	SetDeferred(ctx context.Context, f Fence, engineID string, deferred bool) error

	// RegisterEngine records a live engine; Heartbeat extends the lease of
	// every step it holds in one write and reports which of the given
	// in-flight fences are no longer valid (cancelled or taken over).
	// Heartbeat returns ErrEngineLost when the engine was declared dead.
	RegisterEngine(ctx context.Context, e EngineInfo) error
	Heartbeat(ctx context.Context, engineID string, now time.Time, inflight []Fence) (lost []Fence, err error)
	// StopEngine marks an engine stopped: its remaining steps are reaped at
	// once.
	StopEngine(ctx context.Context, engineID string) error
	// ListEngines returns the engines not yet declared dead or stopped.
	ListEngines(ctx context.Context) ([]EngineInfo, error)
	// Lead makes engineID the maintenance leader until now+ttl when no
	// other engine holds an unexpired lease, or renews the lease it holds,
	// and reports whether engineID leads. StopEngine, and Reap of a lapsed
	// engine, give its lease up at once. Leadership saves work rather than
	// guarding it: every maintenance write is a compare-and-swap, so two
	// engines that both believe they lead do no harm.
	Lead(ctx context.Context, engineID string, now time.Time, ttl time.Duration) (bool, error)

	// Reap returns the running steps of lapsed engines to the queue (ready,
	// the attempt counted) or fails them when their attempts are used up.
	// An engine has lapsed when its heartbeat is older than staleBefore, it
	// stopped, or it is listed in dead. Lapsed engines are marked dead.
	Reap(ctx context.Context, now, staleBefore time.Time, dead []string, engineID string) (int, error)
	// Expire moves ready and waiting steps whose ttl passed, and pending
	// tasks whose good_until passed, to expired.
	Expire(ctx context.Context, now time.Time, engineID string) (int, error)
	// Promote makes waiting steps whose run_at has come ready.
	Promote(ctx context.Context, now time.Time, engineID string) (int, error)
	// NextWake returns the earliest run_at or expiry among waiting and ready
	// steps and pending tasks, so the engine can sleep until then.
	NextWake(ctx context.Context) (time.Time, bool, error)

	// Wake returns a channel that receives a value (coalesced) whenever
	// this store handle makes steps ready. Engines in other processes are
	// reached by the backend's own mechanism or by polling.
	Wake() <-chan struct{}

	Close() error

	// SaveProgress records a running step's progress, a fraction from 0
	// to 1 and a message (fenced like SaveCheckpoint).
	SaveProgress(ctx context.Context, f Fence, fraction float64, message string) error
	// Signal delivers a named signal with its JSON payload to a task. The
	// first step of the task waiting for that name (lowest index) completes
	// with the payload in the same transaction; when none waits, the signal
	// is kept and completes the next step to begin waiting for it. Each
	// signal completes at most one wait. It reports whether a waiting step
	// took the signal at once; a task that has ended is ErrConflict, an
	// unknown task ErrNotFound.
	Signal(ctx context.Context, taskID int64, name string, payload json.RawMessage, engineID string) (delivered bool, err error)

	// CreateAPIKey records a new API key; only the hash of its secret is
	// stored. A key whose id exists is ErrConflict.
	CreateAPIKey(ctx context.Context, k APIKey) error
	// GetAPIKey returns a key by id, revoked or not, or ErrNotFound.
	GetAPIKey(ctx context.Context, id string) (*APIKey, error)
	// ListAPIKeys returns every key, revoked ones included, oldest first.
	ListAPIKeys(ctx context.Context) ([]APIKey, error)
	// RevokeAPIKey marks a key revoked; it then authenticates nothing.
	// Revoking a revoked key is a no-op; an unknown id is ErrNotFound.
	RevokeAPIKey(ctx context.Context, id string) error

	// GetStep returns one step, its dependencies named, or ErrNotFound.
	GetStep(ctx context.Context, id int64) (*Step, error)
	// RetryStep makes a failed or expired step ready again with a fresh
	// attempt count: the steps skipped because of it wait for it again, and
	// a failed task runs again. Any other state is ErrConflict.
	RetryStep(ctx context.Context, id int64, engineID string) error
	// ResolveStep ends a step that is not running by an operator's hand: it
	// becomes resolved (with r.Result, if any, passed to its dependents as
	// a completed step's result would be), its dependents proceed, and a
	// task failed only because of it runs on. A running or finished step
	// (other than failed or expired) is ErrConflict.
	ResolveStep(ctx context.Context, r StepResolution) error

	// QueueDepth counts the unfinished steps (pending, ready, running,
	// waiting) by namespace and state.
	QueueDepth(ctx context.Context) ([]QueueCount, error)
	// CountUnfinishedTasks counts pending and running tasks, stopping at
	// limit so that the cost stays bounded however large the backlog.
	CountUnfinishedTasks(ctx context.Context, limit int) (int, error)
}

// Kinds of steps (StepInsert.Kind, Step.Kind). A plain step has kind "".
const (
	// KindDecision: the step's outcome names which of its direct children
	// run (Outcome.Decide, Outcome.Branches); the others are skipped.
	KindDecision = "decision"
	// KindBatch: the step's outcome creates one item step per batch
	// (Outcome.Spawn); its children wait for every item.
	KindBatch = "batch"
	// KindItem: one item of a batch, created by the store.
	KindItem = "item"
	// KindSignal: the step runs no handler; it waits, holding no slot,
	// until a signal of its name arrives (completed, the payload as its
	// result) or its timeout passes (failed).
	KindSignal = "signal"
)

// WorkflowRecord is a registered workflow version.
type WorkflowRecord struct {
	Namespace  string
	Name       string
	Version    string
	Definition json.RawMessage // the workflow as JSON
	CreatedAt  time.Time
}

// TaskInsert is one task to submit.
type TaskInsert struct {
	Namespace      string
	Workflow       string
	Version        string
	Input          json.RawMessage // JSON; nil means {}
	Priority       int
	RunAt          time.Time // zero: now
	GoodUntil      time.Time // zero: none
	IdempotencyKey string    // "": none
	Steps          []StepInsert
}

// StepInsert is one step of a task to submit, in definition order.
type StepInsert struct {
	Name        string
	Handler     string
	Deps        []int // indexes into TaskInsert.Steps
	Priority    int   // added to the task's priority
	MaxAttempts int
	TTL         time.Duration
	// Kind is "" or one of KindDecision, KindBatch, KindSignal.
	Kind string
	// TriggerRule decides, from its dependencies' outcomes, whether the
	// step runs (see dag.Rule); "" means all_success.
	TriggerRule string
	// Signal names the signal a KindSignal step waits for, and
	// SignalTimeout how long it waits once its dependencies allow (0:
	// forever).
	Signal        string
	SignalTimeout time.Duration
}

// InsertResult is the outcome of one TaskInsert.
type InsertResult struct {
	Task      Task
	Duplicate bool
}

// Task is a stored task. Steps is filled by GetTask only.
type Task struct {
	ID             int64           `json:"id"`
	Namespace      string          `json:"namespace"`
	Workflow       string          `json:"workflow"`
	Version        string          `json:"version"`
	State          state.Task      `json:"state"`
	Input          json.RawMessage `json:"input"`
	Priority       int             `json:"priority"`
	IdempotencyKey string          `json:"idempotency_key,omitempty"`
	RunAt          time.Time       `json:"run_at"`
	GoodUntil      *time.Time      `json:"good_until,omitempty"`
	CreatedAt      time.Time       `json:"created_at"`
	StartedAt      *time.Time      `json:"started_at,omitempty"`
	FinishedAt     *time.Time      `json:"finished_at,omitempty"`
	Error          string          `json:"error,omitempty"`
	Steps          []Step          `json:"steps,omitempty"`
}

// Step is a stored step of a task.
type Step struct {
	ID          int64           `json:"id"`
	TaskID      int64           `json:"task_id"`
	Index       int             `json:"index"`
	Name        string          `json:"name"`
	Handler     string          `json:"handler"`
	Namespace   string          `json:"namespace"`
	State       state.Step      `json:"state"`
	Sub         string          `json:"sub_status,omitempty"` // "deferred" while running
	DependsOn   []string        `json:"depends_on,omitempty"`
	Attempts    int             `json:"attempts"`
	MaxAttempts int             `json:"max_attempts"`
	Priority    int             `json:"priority"`
	Result      json.RawMessage `json:"result,omitempty"`
	Error       string          `json:"error,omitempty"`
	Checkpoint  json.RawMessage `json:"checkpoint,omitempty"`
	// Kind is "" or one of the Kind constants.
	Kind string `json:"kind,omitempty"`
	// Template names the step template an item of a batch runs, and Item
	// is its batch item.
	Template string          `json:"template,omitempty"`
	Item     json.RawMessage `json:"batch,omitempty"`
	// Signal is the signal a KindSignal step waits for.
	Signal string `json:"signal,omitempty"`
	// Progress is the fraction (0 to 1) the handler last reported, with
	// its message.
	Progress        *float64   `json:"progress,omitempty"`
	ProgressMessage string     `json:"progress_message,omitempty"`
	RunAt           *time.Time `json:"run_at,omitempty"`
	EngineID        string     `json:"engine_id,omitempty"`
	StartedAt       *time.Time `json:"started_at,omitempty"`
	FinishedAt      *time.Time `json:"finished_at,omitempty"`
}

// TaskFilter selects tasks for ListTasks. Zero fields do not filter.
type TaskFilter struct {
	Namespace string
	Workflow  string
	State     state.Task
	BeforeID  int64 // cursor: only tasks with a smaller id
	Limit     int   // default 100
	// CreatedAfter and CreatedBefore bound the creation time (inclusive,
	// exclusive); zero does not bound.
	CreatedAfter  time.Time
	CreatedBefore time.Time
}

// Fence identifies one attempt's hold on a step. A write guarded by a fence
// succeeds only while the step is running under exactly this attempt and
// lease.
type Fence struct {
	StepID  int64 `json:"step_id"`
	Attempt int   `json:"attempt"`
	LeaseID int64 `json:"lease_id"`
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
	// TaskID limits the claim to one task's steps; 0 means any task.
	TaskID int64
	// LeaseID is the lease the claimed steps are held under; 0 lets the
	// store choose. An engine chooses it so it can release the claim with
	// ReleaseLease if the claim's outcome is unknown.
	LeaseID int64
}

// ClaimedStep is a step claimed for execution with what its handler sees.
type ClaimedStep struct {
	Step
	Fence    Fence
	Workflow string
	Version  string
	Input    json.RawMessage            // the task input
	Deps     map[string]json.RawMessage // results of dependencies by name
}

// Outcome is the result of one attempt, to record with CompleteSteps.
type Outcome struct {
	Fence    Fence
	EngineID string
	// State is StepCompleted, StepFailed (permanent) or StepWaiting (a retry
	// or snooze at RunAt).
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
}

// Spawn describes the items a batch step creates: one step per item, run
// by the template, named "<batch step>[<n>]", ready at once. The batch
// step's children wait for every item as well.
type Spawn struct {
	// Template is the step template the items run: its Name (the
	// template's name), Handler, MaxAttempts, Priority and TTL are used.
	Template StepInsert
	// Items are the batch items, one JSON value each.
	Items []json.RawMessage
	// MaxSteps bounds the steps of the task, items included; a batch that
	// would exceed it fails instead. 0 means no bound.
	MaxSteps int
}

// EngineInfo describes a live engine process.
type EngineInfo struct {
	ID          string
	Host        string
	PID         int
	StartedAt   time.Time
	HeartbeatAt time.Time
	// Leader reports that the engine holds the maintenance lease.
	Leader bool
}

// AuditEntry is one recorded transition of a task (Step == "") or a step.
type AuditEntry struct {
	ID       int64     `json:"id"`
	TaskID   int64     `json:"task_id"`
	Step     string    `json:"step,omitempty"`
	From     string    `json:"from"`
	To       string    `json:"to"`
	At       time.Time `json:"at"`
	Attempt  int       `json:"attempt,omitempty"`
	EngineID string    `json:"engine_id,omitempty"`
	Reason   string    `json:"reason,omitempty"`
}
