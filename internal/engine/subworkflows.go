package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/weftrun/weft/internal/ident"

	"github.com/weftrun/weft/internal/event"
	"github.com/weftrun/weft/internal/expr"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/workflow"
)

// This file holds sub-workflows: the built-in handler of workflow steps,
// which starts a child task and lets the step wait for it with its slot
// free, and the child tasks Go handlers start and wait for.

// childStart is how the sub-workflow handler asks settle for an outcome
// that starts a child task.
type childStart struct{ child store.ChildStart }

func (c *childStart) Error() string { return "starting a child task" }

// childFailed is the error of an attempt that reports why the step's last
// child did not complete: a failure under the step's retry policy.
type childFailed struct{ msg string }

func (c *childFailed) Error() string { return c.msg }

// values caches compiled input expressions of workflow steps by source.
type values struct{ m sync.Map }

func (v *values) get(src string) (*expr.Value, error) {
	if x, ok := v.m.Load(src); ok {
		return x.(*expr.Value), nil
	}
	x, err := expr.CompileValue(src)
	if err != nil {
		return nil, err
	}
	v.m.Store(src, x)
	return x, nil
}

// subWorkflow is the handler of workflow steps. Its first run in an attempt
// builds the child's insert, which the outcome records with the child in
// one transaction (so a step run again after a crash never starts a second
// child); once a child did not complete, the next run reports why.
func (e *Engine) subWorkflow(ctx context.Context, r *Run) (any, error) {
	c := r.claimed
	if c.ChildError != "" {
		return nil, &childFailed{msg: c.ChildError}
	}
	w, def, err := e.defs.claimedDefinition(ctx, *c)
	if err != nil {
		return nil, err
	}
	input := c.Input
	if in, ok := callInput(c.Step); ok {
		input = in // a durable function's child call
	} else if def.Input != "" {
		v, err := e.values.get(def.Input)
		if err != nil {
			return nil, failNow(fmt.Errorf("input: %w", err))
		}
		if input, err = v.Eval(c.Input, c.Deps); err != nil {
			return nil, failNow(fmt.Errorf("input: %w", err))
		}
	}
	// The lease is new with every claim: the key names this start alone.
	key := "child:" + strconv.FormatInt(c.ID, 10) + "/" + strconv.FormatInt(c.Fence.LeaseID, 10)
	in, err := e.prepare(ctx, Submission{Workflow: def.Workflow, Input: input, Key: key, Priority: c.Priority,
		OnConflict: workflow.OnConflictReturn}, map[string]*resolvedWorkflow{})
	if err != nil {
		if errors.Is(err, store.ErrInvalid) {
			return nil, failNow(err)
		}
		return nil, err // a workflow not registered yet: retried by the policy
	}
	limits := w.Limits.Resolve()
	return nil, &childStart{child: store.ChildStart{Task: in, MaxDepth: limits.MaxDepth, MaxChildren: limits.MaxChildren}}
}

// StartChild starts a child task of the workflow ref with input from the
// running step, named name among the children the step starts: a step
// that runs again (after a crash or a retry) and starts a child of the same
// name gets the existing one. The parent workflow's limits bound it.
func (r *Run) StartChild(ctx context.Context, name, ref string, input any) (int64, error) {
	e := r.engine
	if !workflow.ValidName(name) {
		return 0, fmt.Errorf("%w child name %q: use %s", store.ErrInvalid, name, ident.Rule)
	}
	ns, wname, version, err := workflow.ParseRef(r.Workflow)
	if err != nil {
		return 0, err
	}
	parent, err := e.defs.get(ctx, ns, wname, version)
	if err != nil {
		return 0, fmt.Errorf("start child: definition of %s: %w", r.Workflow, err)
	}
	key := "child:" + strconv.FormatInt(r.TaskID, 10) + "/" + r.Step + "/" + name
	in, err := e.prepare(ctx, Submission{Workflow: ref, Input: input, Key: key, Priority: r.claimed.Priority,
		OnConflict: workflow.OnConflictReturn}, map[string]*resolvedWorkflow{})
	if err != nil {
		return 0, err
	}
	limits := parent.Limits.Resolve()
	res, err := e.store.StartChild(ctx, r.fence, store.ChildStart{Task: in, MaxDepth: limits.MaxDepth, MaxChildren: limits.MaxChildren})
	if err != nil {
		return 0, fmt.Errorf("start child %q of step %q: %w", name, r.Step, err)
	}
	if !res.Duplicate {
		e.events.Publish(event.Event{Kind: event.Submitted, Namespace: res.Task.Namespace, Workflow: res.Task.Workflow, TaskID: res.Task.ID})
	}
	return res.Task.ID, nil
}

// WaitChild waits, with the handler's slot released (see DeferUntil), for
// a child task to end, checking every interval (0: a second). A completed
// child returns its result (its final steps' results by step name); any
// other end is an error naming the child's state and error.
func (r *Run) WaitChild(ctx context.Context, id int64, interval time.Duration) (json.RawMessage, error) {
	if interval <= 0 {
		interval = time.Second
	}
	e := r.engine
	var ended *store.Task
	err := r.DeferUntil(ctx, func(ctx context.Context) (bool, error) {
		t, err := e.store.GetTask(ctx, id)
		if err != nil {
			return false, fmt.Errorf("wait for child task %d: %w", id, err)
		}
		if t.State.Terminal() {
			ended = t
		}
		return ended != nil, nil
	}, interval)
	if err != nil {
		return nil, err
	}
	if ended.State != state.TaskCompleted {
		msg := fmt.Sprintf("child task %d %s", id, ended.State)
		if ended.Error != "" {
			msg += ": " + ended.Error
		}
		return nil, errors.New(msg)
	}
	return e.store.TaskResult(ctx, id)
}
