package weft

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/weftrun/weft/internal/engine"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/workflow"
)

// Task is a submitted run of a workflow with its state and, from Get, its
// steps.
type Task = store.Task

// TaskStep is the stored state of one step of a task.
type TaskStep = store.Step

// AuditEntry is one recorded state transition.
type AuditEntry = store.AuditEntry

// TaskFilter selects tasks for List.
type TaskFilter = store.TaskFilter

// MaxPriority bounds Submission.Priority either way: a priority outside
// -MaxPriority..MaxPriority is ErrInvalid.
const MaxPriority = engine.MaxPriority

// Submission is one task to submit.
type Submission struct {
	// Workflow is "namespace/name" (the newest registered version) or
	// "namespace/name@version".
	Workflow string
	// Input is encoded as JSON; a json.RawMessage or []byte is used as is.
	// Nil means {}.
	Input any
	// Key is the idempotency key: a submission whose key exists in the
	// namespace returns the existing task. Required when the workflow's
	// identity is "caller"; derived from the input when it is "strict".
	Key string
	// Priority orders the task's steps before others (higher first), from
	// -MaxPriority to MaxPriority.
	Priority int
	// RunAt delays the task; zero means now.
	RunAt time.Time
	// GoodUntil expires the task if no step has started by then.
	GoodUntil time.Time
	// OnConflict is what happens when Key exists in the namespace:
	// workflow.OnConflictReturn returns the task holding it (Duplicate),
	// workflow.OnConflictSupersede submits a new task that takes the key
	// and cancels the holder if it has not finished. "" means the
	// workflow's own setting (return unless it says otherwise).
	OnConflict workflow.OnConflict
	// Tags label the task: List and the bulk actions filter by them. At
	// most 20; keys of letters, digits, '_', '.', '-', '/' (up to 63
	// bytes), values of up to 255 bytes without control characters.
	Tags map[string]string
}

// SubmitResult is the task a submission created or, for a duplicate, found.
type SubmitResult struct {
	Task      Task
	Duplicate bool
	// Superseded is the task that held the key of a submission with
	// OnConflictSupersede (0: none held it).
	Superseded int64
}

// Register validates a workflow version and records it in the store. The
// same definition may be registered again; a different definition under an
// existing version is refused with ErrConflict. Steps may name handlers that
// are not registered yet.
func (e *Engine) Register(ctx context.Context, w *workflow.Workflow) error {
	_, _, err := e.core.Definitions().Register(ctx, w)
	return err
}

// WorkflowRecord is a registered workflow version as stored.
type WorkflowRecord = store.WorkflowRecord

// RegisterVersion is Register that also returns the version as stored and
// whether this call created it (a transport answers "created" or "already
// there" from it).
func (e *Engine) RegisterVersion(ctx context.Context, w *workflow.Workflow) (WorkflowRecord, bool, error) {
	return e.core.Definitions().Register(ctx, w)
}

// Registered returns a registered workflow version as stored (its JSON
// definition and creation time); version "" means the newest.
func (e *Engine) Registered(ctx context.Context, namespace, name, version string) (*WorkflowRecord, error) {
	return e.core.Definitions().Registered(ctx, namespace, name, version)
}

// Workflows lists the registered workflow versions.
func (e *Engine) Workflows(ctx context.Context) ([]WorkflowRecord, error) {
	return e.core.Definitions().Workflows(ctx)
}

// MissingHandlers lists the handlers a workflow names that this engine has
// not registered.
func (e *Engine) MissingHandlers(w *workflow.Workflow) []string {
	return e.core.Definitions().MissingHandlers(w)
}

// Workflow returns a registered workflow; version "" means the newest.
func (e *Engine) Workflow(ctx context.Context, namespace, name, version string) (*workflow.Workflow, error) {
	return e.core.Definitions().Workflow(ctx, namespace, name, version)
}

// Submit submits one task. A submission whose idempotency key already exists
// returns the existing task with Duplicate set.
func (e *Engine) Submit(ctx context.Context, s Submission) (SubmitResult, error) {
	res, err := e.SubmitMany(ctx, []Submission{s})
	if err != nil {
		return SubmitResult{}, err
	}
	return res[0], nil
}

// SubmitMany submits tasks in one transaction: all of them or none.
func (e *Engine) SubmitMany(ctx context.Context, subs []Submission) ([]SubmitResult, error) {
	return results(e.core.SubmitMany(ctx, submissions(subs)))
}

// SubmitTx submits tasks inside the caller's own database/sql transaction
// on the engine's database (SQLite, or PostgreSQL through pgx's stdlib
// driver), so that they exist only if tx commits, atomically with the
// caller's writes; engines learn of them when it does. SubmitPgxTx takes a
// transaction of pgx itself. A nil tx, or a store that takes no caller's
// transaction, is an error wrapping errors.ErrUnsupported.
func (e *Engine) SubmitTx(ctx context.Context, tx *sql.Tx, subs ...Submission) ([]SubmitResult, error) {
	if tx == nil {
		return nil, fmt.Errorf("SubmitTx: no transaction: %w", errors.ErrUnsupported)
	}
	return results(e.core.SubmitTx(ctx, tx, submissions(subs)))
}

// PgxTx is a transaction of pgx, the PostgreSQL driver: the pgx.Tx that
// pgx.Conn.Begin and pgxpool.Pool.Begin return. (Two of its methods name it
// here, so that programs on SQLite do not link the driver.)
type PgxTx interface {
	Commit(ctx context.Context) error
	Rollback(ctx context.Context) error
}

// SubmitPgxTx is SubmitTx with a pgx.Tx on the engine's PostgreSQL
// database. A nil tx, another store or a PgxTx that is not pgx's is an
// error wrapping errors.ErrUnsupported.
func (e *Engine) SubmitPgxTx(ctx context.Context, tx PgxTx, subs ...Submission) ([]SubmitResult, error) {
	if tx == nil {
		return nil, fmt.Errorf("SubmitPgxTx: no transaction: %w", errors.ErrUnsupported)
	}
	return results(e.core.SubmitTx(ctx, tx, submissions(subs)))
}

func submissions(subs []Submission) []engine.Submission {
	out := make([]engine.Submission, len(subs))
	for i, s := range subs {
		out[i] = engine.Submission(s)
	}
	return out
}

func results(res []engine.SubmitResult, err error) ([]SubmitResult, error) {
	if err != nil {
		return nil, err
	}
	out := make([]SubmitResult, len(res))
	for i, r := range res {
		out[i] = SubmitResult(r)
	}
	return out, nil
}

// Get returns a task with its steps.
func (e *Engine) Get(ctx context.Context, id int64) (*Task, error) {
	return e.core.Admin().Get(ctx, id)
}

// List returns tasks, newest first.
func (e *Engine) List(ctx context.Context, f TaskFilter) ([]Task, error) {
	return e.core.Admin().List(ctx, f)
}

// Audit returns a task's recorded transitions, oldest first, then the
// claims of its running steps not yet recorded (ID 0): a claim is
// recorded when its run ends or at its engine's next heartbeat.
func (e *Engine) Audit(ctx context.Context, taskID int64) ([]AuditEntry, error) {
	return e.core.Admin().Audit(ctx, taskID)
}

// Cancel cancels a task: every step not yet finished becomes cancelled and
// the contexts of its running handlers on this engine are cancelled at once
// (engines elsewhere notice at their next heartbeat).
func (e *Engine) Cancel(ctx context.Context, id int64) error {
	return e.core.Admin().Cancel(ctx, id, "", "")
}

// Retry runs a failed task again from its failed steps.
func (e *Engine) Retry(ctx context.Context, id int64) error {
	return e.core.Admin().Retry(ctx, id, "", "")
}

// Operator is who takes an operator action and why, for the audit trail.
type Operator struct {
	// Actor names who acted, e.g. "api:<key name>" or "cli:<OS user>";
	// "" records the engine's id.
	Actor string
	// Reason says why; "" records a default ("cancelled by user",
	// "retried").
	Reason string
}

// CancelAs cancels a task like Cancel, recording op's actor and reason in
// the audit trail.
func (e *Engine) CancelAs(ctx context.Context, id int64, op Operator) error {
	return e.core.Admin().Cancel(ctx, id, op.Actor, op.Reason)
}

// RetryAs retries a failed task like Retry, recording op's actor and
// reason in the audit trail.
func (e *Engine) RetryAs(ctx context.Context, id int64, op Operator) error {
	return e.core.Admin().Retry(ctx, id, op.Actor, op.Reason)
}

// Step returns one step of a task.
func (e *Engine) Step(ctx context.Context, id int64) (*TaskStep, error) {
	return e.core.Admin().Step(ctx, id)
}

// RetryStep makes a failed or expired step ready again with a fresh attempt
// count: the steps skipped because of it wait for it again, and a failed
// task runs again. Any other state is ErrConflict. op.Actor is recorded in
// the audit trail with op.Reason.
func (e *Engine) RetryStep(ctx context.Context, id int64, op Operator) error {
	return e.core.Admin().RetryStep(ctx, id, op.Actor, op.Reason)
}

// StepResolution is an operator's resolution of a step: its result (if
// any) is what its dependents see.
type StepResolution = store.StepResolution

// ResolveStep ends a step that is not running by an operator's hand: it
// becomes resolved, its dependents proceed, and a task failed only because
// of it runs on. A running or finished step (other than failed or
// expired) is ErrConflict.
func (e *Engine) ResolveStep(ctx context.Context, r StepResolution) error {
	return e.core.Admin().ResolveStep(ctx, r)
}

// QueueCount is how many unfinished steps of a namespace are in one state.
type QueueCount = store.QueueCount

// QueueDepth counts the unfinished steps (pending, ready, running, waiting)
// by namespace and state.
func (e *Engine) QueueDepth(ctx context.Context) ([]QueueCount, error) {
	return e.core.Admin().QueueDepth(ctx)
}

// Backlog counts pending and running tasks, stopping at limit so that the
// cost stays bounded however large the backlog is. An error means the
// database does not answer.
func (e *Engine) Backlog(ctx context.Context, limit int) (int, error) {
	return e.core.Admin().Backlog(ctx, limit)
}

// Wait blocks until the task ends or ctx is done, and returns the task. It
// wakes when this engine's store ends a task, and polls for tasks finished
// by engines elsewhere.
func (e *Engine) Wait(ctx context.Context, id int64) (*Task, error) { return e.core.Wait(ctx, id) }

// Signal sends a named signal with a payload (encoded as JSON; nil means
// null) to a task. The task's first step waiting for that name completes
// with {"signal": name, "payload": payload} as its result; if none waits
// yet, the signal is kept for the next step that begins to. It reports
// whether a waiting step took it at once. A task that has ended is
// ErrConflict.
func (e *Engine) Signal(ctx context.Context, taskID int64, name string, payload any) (bool, error) {
	return e.core.Signal(ctx, taskID, name, payload, "")
}

// SignalAs sends a signal like Signal, recording op.Actor as who sent it
// in the audit trail.
func (e *Engine) SignalAs(ctx context.Context, taskID int64, name string, payload any, op Operator) (bool, error) {
	return e.core.Signal(ctx, taskID, name, payload, op.Actor)
}
