package weft

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/weftrun/weft/internal/builtin"
	"github.com/weftrun/weft/internal/dag"
	"github.com/weftrun/weft/internal/retry"
	"github.com/weftrun/weft/store"
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

// Errors returned by the engine; test with errors.Is.
var (
	ErrNotFound = store.ErrNotFound
	ErrConflict = store.ErrConflict
	// ErrInvalid reports a submission or definition that is not valid.
	ErrInvalid = errors.New("invalid")
)

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
	Key      string
	Priority int
	// RunAt delays the task; zero means now.
	RunAt time.Time
	// GoodUntil expires the task if no step has started by then.
	GoodUntil time.Time
}

// SubmitResult is the task a submission created or, for a duplicate, found.
type SubmitResult struct {
	Task      Task
	Duplicate bool
}

const defaultMaxAttempts = 3

// resolve fills in the policy defaults.
func (p RetryPolicy) resolve() retry.Policy {
	r := retry.Policy{MaxAttempts: p.MaxAttempts, Backoff: p.Backoff, Initial: time.Duration(p.Initial), Max: time.Duration(p.Max)}
	if r.MaxAttempts == 0 {
		r.MaxAttempts = defaultMaxAttempts
	}
	if r.Backoff == "" {
		r.Backoff = retry.Exponential
	}
	if r.Initial == 0 {
		r.Initial = time.Second
	}
	if r.Max == 0 {
		r.Max = time.Hour
	}
	switch {
	case p.Jitter != nil:
		r.Jitter = *p.Jitter
	case r.Backoff == retry.Exponential:
		r.Jitter = 0.1
	}
	return r
}

func randFloat() float64 { return rand.Float64() }

func (e *Engine) registerBuiltins() {
	e.Handle("exec", func(ctx context.Context, a *Attempt) (any, error) {
		return builtin.Exec(ctx, a.builtinRequest())
	})
	e.Handle("http", func(ctx context.Context, a *Attempt) (any, error) {
		return builtin.HTTP(ctx, e.cfg.HTTPClient, a.builtinRequest())
	})
}

func (a *Attempt) builtinRequest() builtin.Request {
	return builtin.Request{TaskID: a.TaskID, Step: a.Step, Attempt: a.Number, Input: a.Input, Deps: a.Deps, Config: a.Config, Checkpoint: a.Checkpoint,
		Batch: a.Batch, Report: attemptReporter{a}}
}

// attemptReporter saves what a built-in handler reports for its attempt.
type attemptReporter struct{ a *Attempt }

func (r attemptReporter) SaveCheckpoint(ctx context.Context, cp json.RawMessage) error {
	return r.a.SaveCheckpoint(ctx, cp)
}

func (r attemptReporter) Progress(ctx context.Context, fraction float64, message string) error {
	return r.a.Progress(ctx, fraction, message)
}

// builtinConfigCheck validates the configs of steps run by built-in handlers.
var builtinConfigCheck = map[string]func(json.RawMessage) error{
	"exec": builtin.ValidateExecConfig,
	"http": builtin.ValidateHTTPConfig,
}

// Register validates a workflow version and records it in the store. The
// same definition may be registered again; a different definition under an
// existing version is refused with ErrConflict. Steps may name handlers that
// are not registered yet.
func (e *Engine) Register(ctx context.Context, w *Workflow) error {
	if err := w.Validate(); err != nil {
		return fmt.Errorf("%w workflow: %w", ErrInvalid, err)
	}
	def, err := json.Marshal(w)
	if err != nil {
		return fmt.Errorf("weft: encode workflow %s: %w", w.Ref(), err)
	}
	if err := e.store.PutWorkflow(ctx, store.WorkflowRecord{Namespace: w.Namespace, Name: w.Name, Version: w.Version, Definition: def}); err != nil {
		return fmt.Errorf("weft: register %s: %w", w.Ref(), err)
	}
	e.mu.Lock()
	e.workflows[w.Ref()] = w
	e.mu.Unlock()
	return nil
}

// MissingHandlers lists the handlers a workflow names that this engine has
// not registered.
func (e *Engine) MissingHandlers(w *Workflow) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var missing []string
	seen := map[string]bool{}
	for _, s := range append(slices.Clip(w.Steps), w.Templates...) {
		if s.Type == StepSignal {
			continue // runs no handler
		}
		if e.handlers[s.Handler] == nil && !seen[s.Handler] {
			seen[s.Handler] = true
			missing = append(missing, s.Handler)
		}
	}
	return missing
}

// Workflow returns a registered workflow; version "" means the newest.
func (e *Engine) Workflow(ctx context.Context, namespace, name, version string) (*Workflow, error) {
	return e.workflow(ctx, namespace, name, version)
}

func (e *Engine) workflow(ctx context.Context, namespace, name, version string) (*Workflow, error) {
	if version != "" {
		e.mu.Lock()
		w := e.workflows[namespace+"/"+name+"@"+version]
		e.mu.Unlock()
		if w != nil {
			return w, nil
		}
	}
	rec, err := e.store.GetWorkflow(ctx, namespace, name, version)
	if err != nil {
		return nil, err
	}
	var w Workflow
	if err := json.Unmarshal(rec.Definition, &w); err != nil {
		return nil, fmt.Errorf("weft: decode stored workflow %s/%s@%s: %w", namespace, name, rec.Version, err)
	}
	e.mu.Lock()
	e.workflows[w.Ref()] = &w
	e.mu.Unlock()
	return &w, nil
}

// ParseRef splits "namespace/name[@version]".
func ParseRef(ref string) (namespace, name, version string, err error) {
	rest, version, _ := strings.Cut(ref, "@")
	namespace, name, ok := strings.Cut(rest, "/")
	if !ok || namespace == "" || name == "" || strings.Contains(name, "/") || strings.HasSuffix(ref, "@") {
		return "", "", "", fmt.Errorf("%w workflow reference %q: want namespace/name or namespace/name@version", ErrInvalid, ref)
	}
	return namespace, name, version, nil
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
	return e.submit(ctx, subs, e.store.InsertTasks)
}

// SubmitTx submits tasks inside the caller's own PostgreSQL transaction, so
// that they exist only if tx commits, atomically with the caller's writes.
// Engines learn of them when tx commits. It needs the PostgreSQL store;
// SubmitSQLTx takes a database/sql transaction on either store.
func (e *Engine) SubmitTx(ctx context.Context, tx pgx.Tx, subs ...Submission) ([]SubmitResult, error) {
	s, ok := e.store.(interface {
		InsertTasksTx(context.Context, pgx.Tx, []store.TaskInsert) ([]store.InsertResult, error)
	})
	if !ok {
		return nil, fmt.Errorf("weft: SubmitTx needs the PostgreSQL store, not %T (use SubmitSQLTx): %w", e.store, errors.ErrUnsupported)
	}
	return e.submit(ctx, subs, func(ctx context.Context, in []store.TaskInsert) ([]store.InsertResult, error) {
		return s.InsertTasksTx(ctx, tx, in)
	})
}

// SubmitSQLTx submits tasks inside the caller's own database/sql
// transaction on the engine's database (the SQLite file, or PostgreSQL
// through pgx's stdlib driver), so that they exist only if tx commits.
func (e *Engine) SubmitSQLTx(ctx context.Context, tx *sql.Tx, subs ...Submission) ([]SubmitResult, error) {
	s, ok := e.store.(interface {
		InsertTasksSQLTx(context.Context, *sql.Tx, []store.TaskInsert) ([]store.InsertResult, error)
	})
	if !ok {
		return nil, fmt.Errorf("weft: SubmitSQLTx: %T does not take a caller's transaction: %w", e.store, errors.ErrUnsupported)
	}
	return e.submit(ctx, subs, func(ctx context.Context, in []store.TaskInsert) ([]store.InsertResult, error) {
		return s.InsertTasksSQLTx(ctx, tx, in)
	})
}

// submit resolves and validates submissions and hands them to insert.
func (e *Engine) submit(ctx context.Context, subs []Submission, insert func(context.Context, []store.TaskInsert) ([]store.InsertResult, error)) ([]SubmitResult, error) {
	inserts := make([]store.TaskInsert, len(subs))
	resolved := map[string]*resolvedWorkflow{} // by reference, looked up once per call
	for i, s := range subs {
		in, err := e.prepare(ctx, s, resolved)
		if err != nil {
			if len(subs) > 1 {
				return nil, fmt.Errorf("submission %d: %w", i+1, err)
			}
			return nil, err
		}
		inserts[i] = in
	}
	res, err := insert(ctx, inserts)
	if err != nil {
		return nil, fmt.Errorf("weft: submit: %w", err)
	}
	for _, s := range subs {
		if !s.RunAt.IsZero() || !s.GoodUntil.IsZero() {
			e.nudgeTimers()
			break
		}
	}
	out := make([]SubmitResult, len(res))
	for i, r := range res {
		out[i] = SubmitResult{Task: r.Task, Duplicate: r.Duplicate}
		if !r.Duplicate {
			e.Publish(Event{Kind: EventSubmitted, Namespace: r.Task.Namespace, Workflow: r.Task.Workflow, TaskID: r.Task.ID})
		}
	}
	return out, nil
}

// resolvedWorkflow is a workflow one submit call refers to, with the steps
// each of its tasks inserts: built once per call and shared, read only, by
// the call's tasks of that workflow.
type resolvedWorkflow struct {
	w     *Workflow
	steps []store.StepInsert
}

// prepare resolves a submission's workflow and builds its insert.
func (e *Engine) prepare(ctx context.Context, s Submission, resolved map[string]*resolvedWorkflow) (store.TaskInsert, error) {
	r := resolved[s.Workflow]
	if r == nil {
		ns, name, version, err := ParseRef(s.Workflow)
		if err != nil {
			return store.TaskInsert{}, err
		}
		w, err := e.workflow(ctx, ns, name, version)
		if err != nil {
			return store.TaskInsert{}, fmt.Errorf("weft: submit %s: %w", s.Workflow, err)
		}
		r = &resolvedWorkflow{w: w, steps: stepInserts(w)}
		resolved[s.Workflow] = r
	}
	w := r.w
	input, err := encodeInput(s.Input)
	if err != nil {
		return store.TaskInsert{}, fmt.Errorf("%w input for %s: %w", ErrInvalid, s.Workflow, err)
	}
	if !s.GoodUntil.IsZero() && !s.RunAt.IsZero() && s.GoodUntil.Before(s.RunAt) {
		return store.TaskInsert{}, fmt.Errorf("%w submission for %s: good_until %s is before run_at %s", ErrInvalid, s.Workflow, s.GoodUntil.Format(time.RFC3339), s.RunAt.Format(time.RFC3339))
	}
	key := s.Key
	switch w.Identity {
	case IdentityStrict:
		if key == "" {
			key, err = strictKey(w, input)
			if err != nil {
				return store.TaskInsert{}, err
			}
		}
	case IdentityCaller:
		if key == "" {
			return store.TaskInsert{}, fmt.Errorf("%w submission for %s: its identity strategy is \"caller\", so an idempotency key is required", ErrInvalid, s.Workflow)
		}
	}
	return store.TaskInsert{Namespace: w.Namespace, Workflow: w.Name, Version: w.Version, Input: input, Priority: s.Priority,
		RunAt: s.RunAt, GoodUntil: s.GoodUntil, IdempotencyKey: key, Steps: r.steps}, nil
}

// stepInserts returns the steps a task of w starts with.
func stepInserts(w *Workflow) []store.StepInsert {
	nodes := make([]dag.Node, len(w.Steps))
	for i, st := range w.Steps {
		nodes[i] = dag.Node{Name: st.Name, Deps: st.DependsOn}
	}
	deps, _ := dag.Edges(nodes)
	steps := make([]store.StepInsert, len(w.Steps))
	for i, st := range w.Steps {
		steps[i] = store.StepInsert{Name: st.Name, Handler: st.Handler, Deps: deps[i], Priority: st.Priority,
			MaxAttempts: st.Retry.resolve().MaxAttempts, TTL: time.Duration(st.TTL), TriggerRule: string(st.rule())}
		switch st.Type {
		case StepDecision:
			steps[i].Kind = store.KindDecision
		case StepBatch:
			steps[i].Kind = store.KindBatch
		case StepSignal:
			steps[i].Kind, steps[i].Signal = store.KindSignal, st.signalName()
			if st.Signal != nil {
				steps[i].SignalTimeout = time.Duration(st.Signal.Timeout)
			}
		}
	}
	return steps
}

func encodeInput(v any) (json.RawMessage, error) {
	var b []byte
	switch x := v.(type) {
	case nil:
		return json.RawMessage(`{}`), nil
	case json.RawMessage:
		b = x
	case []byte:
		b = x
	default:
		var err error
		if b, err = json.Marshal(v); err != nil {
			return nil, err
		}
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return json.RawMessage(`{}`), nil
	}
	if !json.Valid(b) {
		return nil, errors.New("not valid JSON")
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// strictKey hashes the workflow and the canonical form of the input (keys
// sorted, no insignificant space), so equal inputs give equal keys.
func strictKey(w *Workflow, input json.RawMessage) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(input))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return "", fmt.Errorf("%w input: %w", ErrInvalid, err)
	}
	canon, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("canonicalize input: %w", err)
	}
	h := sha256.New()
	h.Write([]byte(w.Ref()))
	h.Write([]byte{0})
	h.Write(canon)
	return "strict:" + hex.EncodeToString(h.Sum(nil)), nil
}

// Get returns a task with its steps.
func (e *Engine) Get(ctx context.Context, id int64) (*Task, error) {
	return e.store.GetTask(ctx, id)
}

// List returns tasks, newest first.
func (e *Engine) List(ctx context.Context, f TaskFilter) ([]Task, error) {
	return e.store.ListTasks(ctx, f)
}

// Audit returns a task's recorded transitions, oldest first.
func (e *Engine) Audit(ctx context.Context, taskID int64) ([]AuditEntry, error) {
	return e.store.Audit(ctx, taskID)
}

// Cancel cancels a task: every step not yet finished becomes cancelled and
// the contexts of its running handlers on this engine are cancelled at once
// (engines elsewhere notice at their next heartbeat).
func (e *Engine) Cancel(ctx context.Context, id int64) error {
	running, err := e.store.CancelTask(ctx, id, e.ID(), "cancelled by user")
	if err != nil {
		return fmt.Errorf("weft: cancel task %d: %w", id, err)
	}
	e.cancelFences(running, errTaskCancelled)
	return nil
}

// Retry runs a failed task again from its failed steps.
func (e *Engine) Retry(ctx context.Context, id int64) error {
	if err := e.store.RetryTask(ctx, id, e.ID()); err != nil {
		return fmt.Errorf("weft: retry task %d: %w", id, err)
	}
	return nil
}

// Wait blocks until the task ends or ctx is done, and returns the task. It
// wakes after each batch of outcomes this engine records, and polls for
// tasks finished by engines elsewhere.
func (e *Engine) Wait(ctx context.Context, id int64) (*Task, error) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		settled := e.settledSignal()
		task, err := e.store.GetTask(ctx, id)
		if err != nil {
			return nil, err
		}
		if task.State.Terminal() {
			return task, nil
		}
		select {
		case <-ctx.Done():
			return task, ctx.Err()
		case <-settled:
		case <-t.C:
		}
	}
}
