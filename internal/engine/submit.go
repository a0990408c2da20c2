package engine

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/weftrun/weft/internal/dag"
	"github.com/weftrun/weft/internal/event"
	"github.com/weftrun/weft/internal/textsafe"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/workflow"
)

// MaxPriority bounds a task's priority either way (workflow.MaxPriority).
const MaxPriority = workflow.MaxPriority

// Submission is one task to submit (see weft.Submission).
type Submission struct {
	Workflow   string
	Input      any
	Key        string
	Priority   int
	RunAt      time.Time
	GoodUntil  time.Time
	OnConflict workflow.OnConflict
	Tags       map[string]string
}

// SubmitResult is the task a submission created or, for a duplicate, found:
// the store's result as it is (a copy of the task for each layer was a
// fifth of what a bulk submission allocated).
type SubmitResult = store.InsertResult

// SubmitMany submits tasks in one transaction: all of them or none. An
// engine that is not busy (little in flight, its last batch of outcomes
// small) claims, in that transaction, the steps they start with ready for
// its free slots (store.SubmitClaimer).
func (e *Engine) SubmitMany(ctx context.Context, subs []Submission) ([]SubmitResult, error) {
	sc, ok := e.store.(store.SubmitClaimer)
	if !ok {
		return e.submit(ctx, subs, e.store.InsertTasks)
	}
	// What the submission claimed starts once its tasks' events are out.
	launch := func() {}
	defer func() { launch() }()
	return e.submit(ctx, subs, func(ctx context.Context, in []store.TaskInsert) (res []store.InsertResult, err error) {
		tried := false
		if !e.completer.busy.Load() && e.exec.inflightCount() <= busyBatch {
			var claimed func()
			claimed, tried, err = e.exec.claimInWrite(func(p store.ClaimParams) (steps []store.ClaimedStep, err error) {
				res, steps, err = sc.InsertAndClaim(ctx, in, p)
				for i := range steps {
					if steps[i].Kind == store.KindFunction {
						e.funcs.inserted(steps[i].TaskID, steps[i].Fence)
					}
				}
				return steps, err
			})
			if err == nil && tried {
				launch = claimed
			}
		}
		if !tried {
			return e.store.InsertTasks(ctx, in)
		}
		return res, err
	})
}

// SubmitTx submits tasks inside the caller's own transaction on the
// engine's database, so that they exist only if tx commits, atomically with
// the caller's writes. Which transaction types a store takes is its own
// (store.TxInserter): a pgx.Tx or *sql.Tx on PostgreSQL, a *sql.Tx on
// SQLite. Engines learn of the tasks when tx commits.
func (e *Engine) SubmitTx(ctx context.Context, tx any, subs []Submission) ([]SubmitResult, error) {
	s, ok := e.store.(store.TxInserter)
	if !ok {
		return nil, fmt.Errorf("SubmitTx: %T does not take a caller's transaction: %w", e.store, errors.ErrUnsupported)
	}
	return e.submit(ctx, subs, func(ctx context.Context, in []store.TaskInsert) ([]store.InsertResult, error) {
		return s.InsertTasksInTx(ctx, tx, in)
	})
}

// submit resolves and validates submissions and hands them to insert.
func (e *Engine) submit(ctx context.Context, subs []Submission, insert func(context.Context, []store.TaskInsert) ([]store.InsertResult, error)) (out []SubmitResult, err error) {
	ctx, span := e.tracer.startSubmit(ctx, subs)
	defer func() { endSubmit(span, out, err) }()
	// The tasks continue the submission's trace (or the caller's, when
	// tracing is off here).
	tp, ts := traceContext(ctx)
	// A task written into a database file deleted or replaced under the
	// engine would be lost: refuse it.
	if err := e.monitor.DatabaseGone(); err != nil {
		return nil, fmt.Errorf("submit: %w", err)
	}
	inserts := make([]store.TaskInsert, len(subs))
	resolved := map[string]*resolvedWorkflow{} // by reference, looked up once per call
	for i, s := range subs {
		in, err := e.prepare(ctx, s, resolved)
		if err != nil {
			if len(subs) > 1 {
				return nil, &SubmissionError{Index: i, Err: err}
			}
			return nil, err
		}
		in.TraceParent, in.TraceState = tp, ts
		if tp == "" {
			// No trace to continue: the task starts its own, so that its
			// logs, its steps and what they call share an id.
			in.TraceParent = newTraceParent()
		}
		inserts[i] = in
	}
	res, err := insert(ctx, inserts)
	if err != nil {
		return nil, fmt.Errorf("submit: %w", err)
	}
	for _, r := range res {
		if r.Superseded != 0 {
			e.log.Info("task superseded", "task_id", r.Superseded, "by", r.Task.ID)
		}
		if !r.Duplicate {
			e.events.Publish(event.Event{Kind: event.Submitted, Namespace: r.Task.Namespace, Workflow: r.Task.Workflow, TaskID: r.Task.ID})
		}
	}
	return res, nil
}

// resolvedWorkflow is a workflow one submit call refers to, with the steps
// each of its tasks inserts: built once per call and shared, read only, by
// the call's tasks of that workflow.
type resolvedWorkflow struct {
	w     *workflow.Workflow
	steps []store.StepInsert
	// limits are the workflow's concurrency limits and rates with a key
	// to compute per task; nil when none has one.
	limits *limitKeys
}

// prepare resolves a submission's workflow and builds its insert.
func (e *Engine) prepare(ctx context.Context, s Submission, resolved map[string]*resolvedWorkflow) (store.TaskInsert, error) {
	if err := workflow.CheckPriority(s.Priority); err != nil {
		return store.TaskInsert{}, fmt.Errorf("submission for %s: %w", s.Workflow, store.Invalidf("priority", "%v", err))
	}
	r := resolved[s.Workflow]
	if r == nil {
		ns, name, version, err := workflow.ParseRef(s.Workflow)
		if err != nil {
			return store.TaskInsert{}, err
		}
		w, err := e.defs.get(ctx, ns, name, version)
		if err != nil {
			return store.TaskInsert{}, fmt.Errorf("submit %s: %w", s.Workflow, err)
		}
		r = &resolvedWorkflow{w: w, steps: stepInserts(w)}
		if r.limits, err = compileLimitKeys(w); err != nil {
			return store.TaskInsert{}, fmt.Errorf("submit %s: %w", s.Workflow, err)
		}
		resolved[s.Workflow] = r
	}
	w := r.w
	input, err := encodeInput(s.Input)
	if err != nil {
		return store.TaskInsert{}, fmt.Errorf("submission for %s: %w", s.Workflow, store.Invalidf("input", "%v", err))
	}
	if !s.GoodUntil.IsZero() && !s.RunAt.IsZero() && s.GoodUntil.Before(s.RunAt) {
		return store.TaskInsert{}, fmt.Errorf("submission for %s: %w", s.Workflow, store.Invalidf("good_until", "%s is before run_at %s", s.GoodUntil.Format(time.RFC3339), s.RunAt.Format(time.RFC3339)))
	}
	key := s.Key
	if err := textsafe.Check(key); err != nil {
		return store.TaskInsert{}, fmt.Errorf("submission for %s: %w", s.Workflow, store.Invalidf("idempotency_key", "%v", err))
	}
	switch w.Identity {
	case workflow.IdentityStrict:
		if key == "" {
			key, err = strictKey(w, input)
			if err != nil {
				return store.TaskInsert{}, err
			}
		}
	case workflow.IdentityCaller:
		if key == "" {
			return store.TaskInsert{}, fmt.Errorf("submission for %s: %w", s.Workflow, store.Invalidf("idempotency_key", "an idempotency key is required: the workflow's identity strategy is \"caller\""))
		}
	}
	onConflict := s.OnConflict
	if onConflict == "" {
		onConflict = w.OnConflict
	}
	switch onConflict {
	case "", workflow.OnConflictReturn:
	case workflow.OnConflictSupersede:
		if key == "" {
			return store.TaskInsert{}, fmt.Errorf("submission for %s: %w", s.Workflow, store.Invalidf("on_conflict", "supersede needs an idempotency key (or the strict identity)"))
		}
	default:
		return store.TaskInsert{}, fmt.Errorf("submission for %s: %w", s.Workflow, store.Invalidf("on_conflict", "%q is not return or supersede", onConflict))
	}
	in := store.TaskInsert{Namespace: w.Namespace, Workflow: w.Name, Version: w.Version, Input: input, Priority: s.Priority,
		RunAt: s.RunAt, GoodUntil: s.GoodUntil, IdempotencyKey: key, Supersede: onConflict == workflow.OnConflictSupersede, Tags: s.Tags, Steps: r.steps}
	if err := r.limits.apply(&in); err != nil {
		return store.TaskInsert{}, fmt.Errorf("%w submission for %s: %w", store.ErrInvalid, s.Workflow, err)
	}
	return in, nil
}

// stepInserts returns the steps a task of w starts with.
func stepInserts(w *workflow.Workflow) []store.StepInsert {
	nodes := make([]dag.Node, len(w.Steps))
	for i, st := range w.Steps {
		nodes[i] = dag.Node{Name: st.Name, Deps: st.DependsOn}
	}
	deps, _ := dag.Edges(nodes)
	steps := make([]store.StepInsert, len(w.Steps))
	for i, st := range w.Steps {
		steps[i] = store.StepInsert{Name: st.Name, Handler: st.Handler, Deps: deps[i], Priority: st.Priority,
			MaxAttempts: retryPolicy(st.Retry).MaxAttempts, TTL: time.Duration(st.TTL), Timeout: storeTimeout(st.Timeout), TriggerRule: string(st.Rule()), Preemptible: st.Preemptible}
		if c := st.Concurrency; c != nil {
			steps[i].LimitKey, steps[i].Limit = stepLimitKey(w, st.Name), c.Limit
		}
		if r := st.RateLimit; r != nil {
			steps[i].RateKey, steps[i].Rate = stepLimitKey(w, st.Name), r.Rate()
		}
		if b := st.CircuitBreaker; b != nil {
			steps[i].Breaker = &store.BreakerSpec{Key: workflow.BreakerKey(w.Namespace, w.Name, st.Name), Failures: b.Failures, Cooldown: time.Duration(b.Cooldown)}
		}
		switch st.Type {
		case workflow.StepDecision:
			steps[i].Kind = store.KindDecision
		case workflow.StepBatch:
			steps[i].Kind = store.KindBatch
		case workflow.StepWorkflow:
			steps[i].Kind, steps[i].Handler = store.KindWorkflow, workflow.SubWorkflowHandler
		case workflow.StepFunction:
			steps[i].Kind = store.KindFunction
		case workflow.StepSignal:
			steps[i].Kind, steps[i].Signal = store.KindSignal, st.SignalName()
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
	if path, err := textsafe.Find(b); err != nil {
		if path == "" {
			return nil, err
		}
		return nil, fmt.Errorf("%s %w", path, err)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// strictKey hashes the workflow and the canonical form of the input (keys
// sorted, no insignificant space), so equal inputs give equal keys.
func strictKey(w *workflow.Workflow, input json.RawMessage) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(input))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return "", fmt.Errorf("%w input: %w", store.ErrInvalid, err)
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

// SubmissionError is the submission of a SubmitMany that was refused, by
// its index (from 0); none of the call's tasks was submitted.
type SubmissionError struct {
	Index int
	Err   error
}

func (e *SubmissionError) Error() string { return fmt.Sprintf("submission %d: %v", e.Index+1, e.Err) }
func (e *SubmissionError) Unwrap() error { return e.Err }
