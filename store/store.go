// Package store defines the interface between the weft engine and a
// database, and the records that cross it. The database is the single source
// of truth: every task, step, lease and audit entry lives behind a Store.
//
// A Store decides the readiness of a finished step's children in the same
// transaction that records the outcome, guards every write to a claimed step
// with its fencing token, and appends every state transition to the audit log.
// Backends live in sub-packages (store/sqlite, store/postgres); the behaviour
// they share is checked by store/storetest.
//
// Store is split by concern, so that code which needs one part asks for that
// part only: Definitions (workflow versions), Queue (what runs steps),
// Engines (membership, leases and maintenance), Admin (operator reads and
// actions) and Credentials (API keys). The records of each concern live in
// the file of its name.
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
	// ErrUnavailable: the database could not be reached (connection
	// refused or lost, the server shutting down or starting up). Nothing
	// was written unless the error came from a commit; retry later.
	ErrUnavailable = errors.New("database unavailable")
	// ErrDatabaseGone: the database file was deleted or replaced since the
	// store opened it; writing on would write into a file nobody sees.
	ErrDatabaseGone = errors.New("the database file was deleted or replaced since it was opened")
	// ErrContended: the write kept meeting concurrent writes it could not
	// be ordered with (on PostgreSQL, a serialization failure or a
	// deadlock, SQLSTATE 40001 or 40P01) after the store tried it again a
	// few times. Nothing was written; retry later.
	ErrContended = errors.New("the database is contended by concurrent changes")
)

// FileChecker is implemented by stores on a file (SQLite): CheckFile
// returns an error wrapping ErrDatabaseGone once the file at the store's path
// is no longer the one it opened (deleted, or replaced by another), nil
// while it is, and another error when it cannot tell.
type FileChecker interface {
	CheckFile() error
}

// Store is the only way the engine reaches the database: every concern
// together, and Close.
type Store interface {
	Definitions
	Queue
	Engines
	Admin
	Operations
	Credentials
	History
	Webhooks
	Schedules
	Children
	Policies
	Breakers
	Stats
	// Close releases the database handles. Calls after Close fail.
	Close() error
}

// Definitions holds the registered workflow versions.
type Definitions interface {
	// PutWorkflow registers a workflow version and returns the version as
	// stored (with its creation time) and whether this call created it.
	// Registering the identical definition again changes nothing; a
	// different definition under an existing version is ErrConflict.
	PutWorkflow(ctx context.Context, w WorkflowRecord) (stored WorkflowRecord, created bool, err error)
	// GetWorkflow returns one version, or the newest registered one when
	// version is "".
	GetWorkflow(ctx context.Context, namespace, name, version string) (*WorkflowRecord, error)
	// ListWorkflows returns every registered version.
	ListWorkflows(ctx context.Context) ([]WorkflowRecord, error)
	// WorkflowExists reports whether some version of a workflow is
	// registered in namespace with name; "" matches any namespace or any
	// name, so ("shop", "") asks whether the namespace shop exists.
	WorkflowExists(ctx context.Context, namespace, name string) (bool, error)
}

// Queue is what runs steps: submitting tasks, claiming ready steps,
// recording what running steps report and their outcomes, and waking the
// engines that wait for work. Every write to a running step is guarded by its
// Fence.
type Queue interface {
	// InsertTasks submits tasks in one transaction. A task whose
	// idempotency key exists in its namespace is not inserted again: its
	// result carries the existing task and Duplicate set.
	InsertTasks(ctx context.Context, tasks []TaskInsert) ([]InsertResult, error)

	// ClaimSteps marks up to p.Limit ready steps running under a new lease
	// for p.EngineID, best effective priority first, honouring the
	// namespace caps, and returns them with their execution context. A
	// step with a timeout gets a deadline: the claim time plus its timeout.
	// An engine that is registered but no longer live gets ErrEngineLost.
	ClaimSteps(ctx context.Context, p ClaimParams) ([]ClaimedStep, error)
	// PeekClaim returns the step that ClaimSteps with p would claim first
	// (the same query and policies, one step), without claiming or locking
	// it for longer than the call; nil when it would claim nothing. Only
	// ID, TaskID, Name, Namespace, Handler and Priority are set. An engine
	// asks it to decide whether to preempt a step.
	PeekClaim(ctx context.Context, p ClaimParams) (*Step, error)
	// HeldPreemptible returns the preemptible steps among held that run
	// under engineID with exactly those fences, with their ID, TaskID,
	// Name, Namespace, Handler, Priority, Attempts, Fence and Workflow set;
	// the others are left out. An engine asks it when a full remote worker
	// heartbeats, to decide whether to preempt one of its steps.
	HeldPreemptible(ctx context.Context, engineID string, held []Fence) ([]ClaimedStep, error)
	// ReleaseLease returns to ready the steps still running under one
	// claim's lease, giving their attempt back. An engine calls it when a
	// claim failed in a way that may still have committed (the reply was
	// lost), so that steps it never started are not held forever. It
	// returns how many steps it released.
	ReleaseLease(ctx context.Context, engineID string, leaseID int64) (int, error)
	// HeldStep returns the step running under engineID with exactly f's
	// attempt and lease: its Step (StartedAt and Deadline included), Fence,
	// Workflow and Version; Input and Deps are not loaded, nor DependsOn. A
	// step id that does not exist is ErrNotFound; a step that exists but is
	// not running under that engine, attempt and lease is an error wrapping
	// ErrStaleLease, whose message never names the engine that holds the
	// step now (it is shown to remote workers, which must not learn the
	// ids of other credentials' workers).
	HeldStep(ctx context.Context, engineID string, f Fence) (*ClaimedStep, error)
	// OverdueSteps returns up to limit running steps whose deadline is
	// before now, earliest deadline first, with Step, Fence, Workflow and
	// Version filled (Input, Deps and DependsOn are not loaded). The store
	// does not fail them: the engine turns each into a failure under the
	// step's retry policy and records it with CompleteSteps, whose fence
	// refuses it if the step ended meanwhile.
	OverdueSteps(ctx context.Context, now time.Time, limit int) ([]ClaimedStep, error)
	// CompleteSteps records outcomes in one transaction, each guarded by
	// its fence, decides the readiness of children and finishes tasks. The
	// result has one entry per outcome: nil or an error wrapping
	// ErrStaleLease.
	CompleteSteps(ctx context.Context, outcomes []Outcome) ([]error, error)

	// SaveCheckpoint stores a running step's checkpoint (fenced).
	SaveCheckpoint(ctx context.Context, f Fence, checkpoint json.RawMessage) error
	// SaveProgress records a running step's progress, a fraction from 0
	// to 1 and a message (fenced like SaveCheckpoint).
	SaveProgress(ctx context.Context, f Fence, fraction float64, message string) error
	// SetDeferred sets or clears the deferred sub-status of a running step
	// (fenced).
	SetDeferred(ctx context.Context, f Fence, engineID string, deferred bool) error

	// Signal delivers a named signal with its JSON payload to a task. The
	// first step of the task waiting for that name (lowest index) completes
	// with the payload in the same transaction; when none waits, the signal
	// is kept and completes the next step to begin waiting for it. Each
	// signal completes at most one wait. It reports whether a waiting step
	// took the signal at once; a task that has ended is ErrConflict, an
	// unknown task ErrNotFound.
	Signal(ctx context.Context, taskID int64, name string, payload json.RawMessage, engineID string) (delivered bool, err error)

	// Wake returns a channel that receives a value (coalesced) whenever
	// this store handle makes steps ready. Engines in other processes are
	// reached by the backend's own mechanism or by polling.
	Wake() <-chan struct{}
}

// Listener is implemented by a Store whose Wake channel also hears the
// steps that other processes make ready (PostgreSQL's LISTEN). Listening
// reports whether it hears them now: while it does, engines poll for
// ready work only as a fallback, for what no notification announces.
type Listener interface {
	Listening() bool
}

// HistoryRoller is a store that keeps the audit trail in time partitions
// (PostgreSQL), so that retention drops a partition instead of deleting
// rows. RollHistory creates the partitions ahead of the database's clock
// and drops each that ended more than window (and a partition's span) ago,
// once the rows in it of tasks still kept have moved to the partition that
// keeps rows by task (audit_kept). The maintenance leader calls it every
// upkeep round with the longest retention; it is safe to call from several
// processes.
type HistoryRoller interface {
	RollHistory(ctx context.Context, window time.Duration) (HistoryRoll, error)
}

// HistoryRoll is what one RollHistory did: the partitions it created and
// dropped, by name, and how many rows it moved to audit_kept.
type HistoryRoll struct {
	Created, Dropped []string
	Moved            int64
}

// DueWaker is a store that tells its engine when a time something falls
// due was written (a delayed step, a ttl, a good_until, a schedule's next
// tick): through it, or, on a store that hears other processes
// (Listener), by one of them. The engine then reads its next due time again
// instead of waiting for its fallback poll.
type DueWaker interface {
	DueWake() <-chan struct{}
}

// TaskEnder is a store that tells its engines when one of its own
// transactions ended a task (completed, failed, cancelled...): TaskEnded
// returns a channel closed once the next such transaction has committed.
// The engine reads the states of the tasks its callers wait for then,
// instead of after every batch of outcomes it records. Tasks that other
// processes end are found by the engine's poll.
type TaskEnder interface {
	TaskEnded() <-chan struct{}
}

// Announcer is a store that can tell the engines of other processes to look
// for work (Listener) when nothing the engine wrote made steps ready: an
// engine announces an outcome that freed room under a concurrency limit
// that held steps back.
type Announcer interface {
	Announce(ctx context.Context) error
}

// OutcomeClaimer is a store that can claim, in the transaction that
// records a batch of outcomes, the steps those outcomes made ready
// (CompleteAndClaim): the children of an engine's steps then run without a
// claim transaction of their own. It claims as ClaimSteps would, under p,
// but only where the claim needs no check of the policies' (no namespace
// limit, weight, rate or open breaker, no step under a key of a limit or a
// rate among those it would take); otherwise it claims nothing and leaves
// the steps to ClaimSteps. It wakes the engines (Wake) as CompleteSteps
// does, unless it took every step the outcomes made ready.
type OutcomeClaimer interface {
	CompleteAndClaim(ctx context.Context, outcomes []Outcome, p ClaimParams) ([]error, []ClaimedStep, error)
}

// SubmitClaimer is a store that can claim, in the transaction that
// inserts tasks, the steps they start with ready (InsertAndClaim), as
// OutcomeClaimer does for the steps a batch of outcomes makes ready: an
// engine's own submission starts running without a claim transaction.
type SubmitClaimer interface {
	InsertAndClaim(ctx context.Context, tasks []TaskInsert, p ClaimParams) ([]InsertResult, []ClaimedStep, error)
}

// Engines is the membership of engines and what keeps their work safe:
// registration, heartbeats and the leases they extend, the election of the
// maintenance leader, and the maintenance it runs (reaping lapsed engines,
// expiry, promotion of due steps, the time of the next due event).
type Engines interface {
	// RegisterEngine records a live engine.
	RegisterEngine(ctx context.Context, e EngineInfo) error
	// Heartbeat records that p.EngineID is alive at p.Now, which extends
	// the lease of every step it holds in one write, and reports which of
	// p.Held are no longer valid (cancelled or taken over). With
	// p.Complete it also releases the steps running under the engine that
	// p.Held does not list and that were claimed before p.ClaimedBefore
	// (see HeartbeatParams); they are ready at once and wake the engines
	// waiting for work. It returns ErrEngineLost when the engine was
	// declared dead.
	Heartbeat(ctx context.Context, p HeartbeatParams) (HeartbeatResult, error)
	// StopEngine marks an engine stopped: its remaining steps are reaped at
	// once.
	StopEngine(ctx context.Context, engineID string) error
	// ListEngines returns the engines not yet declared dead or stopped.
	ListEngines(ctx context.Context) ([]EngineInfo, error)
	// GetEngine returns one engine or remote worker, in any state, with
	// its owner; ErrNotFound if the id was never registered.
	GetEngine(ctx context.Context, id string) (*EngineInfo, error)
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
	// Promote makes waiting steps whose run_at has come ready, and fails
	// signal waits whose timeout passed.
	Promote(ctx context.Context, now time.Time, engineID string) (int, error)
	// NextWake returns the earliest time something becomes due: the run_at
	// or expiry of waiting and ready steps, the good_until of pending
	// tasks, the deadline of running steps and the next tick of schedules
	// not paused, so that the maintenance
	// leader can sleep until then. A deadline that has passed is returned
	// until its step leaves running.
	NextWake(ctx context.Context) (time.Time, bool, error)
}

// Admin is what operators read and do: tasks and steps with their history,
// cancellation, retries and manual resolution, and the counts behind
// metrics and admission control.
type Admin interface {
	// GetTask returns a task with its steps.
	GetTask(ctx context.Context, id int64) (*Task, error)
	// TaskStates returns the states alone of the tasks of ids that exist,
	// by id: one cheap read for all those who wait for tasks to end.
	TaskStates(ctx context.Context, ids []int64) (map[int64]state.Task, error)
	// ListTasks returns tasks without their steps, newest first.
	ListTasks(ctx context.Context, f TaskFilter) ([]Task, error)
	// Audit returns a task's transitions, oldest first, then the claims
	// of its running steps not yet recorded (ID 0), in claim order.
	Audit(ctx context.Context, taskID int64) ([]AuditEntry, error)
	// GetStep returns one step, its dependencies named, or ErrNotFound.
	GetStep(ctx context.Context, id int64) (*Step, error)

	// CancelTask cancels a task and every non-terminal step. It returns the
	// fences of the steps that were running, whose handlers must stop.
	CancelTask(ctx context.Context, id int64, engineID, reason string) ([]Fence, error)
	// RetryTask moves a failed task back to running: its failed and expired
	// steps become ready with fresh attempts and the steps skipped because
	// of them are evaluated again.
	// engineID names who acted and reason why (recorded in the audit;
	// "" records "retried").
	RetryTask(ctx context.Context, id int64, engineID, reason string) error
	// RetryStep makes a failed or expired step ready again with a fresh
	// attempt count: the steps skipped because of it wait for it again, and
	// a failed task runs again. Any other state is ErrConflict. engineID
	// names who acted and reason why ("" records "step retried by an
	// operator").
	RetryStep(ctx context.Context, id int64, engineID, reason string) error
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

// Credentials holds the API keys of the REST API and the dashboard's
// browser sessions, each of which stands for one key.
type Credentials interface {
	// CreateAPIKey records a new API key; only the hash of its secret is
	// stored. A key whose id exists is ErrConflict.
	CreateAPIKey(ctx context.Context, k APIKey) error
	// GetAPIKey returns a key by id, revoked or not, or ErrNotFound.
	GetAPIKey(ctx context.Context, id string) (*APIKey, error)
	// ListAPIKeys returns every key, revoked ones included, oldest first.
	ListAPIKeys(ctx context.Context) ([]APIKey, error)
	// RevokeAPIKey marks a key revoked; it then authenticates nothing, and
	// its sessions are deleted. Revoking a revoked key is a no-op; an
	// unknown id is ErrNotFound.
	RevokeAPIKey(ctx context.Context, id string) error

	// CreateSession records a browser session of a key that exists and is
	// not revoked (else ErrNotFound), and deletes the sessions that have
	// expired. A session whose id exists is ErrConflict.
	CreateSession(ctx context.Context, s Session) error
	// GetSession returns a session by id with its key, or ErrNotFound when
	// there is none or it has expired.
	GetSession(ctx context.Context, id string) (*Session, error)
	// DeleteSession ends a session; an unknown id is a no-op.
	DeleteSession(ctx context.Context, id string) error
}
