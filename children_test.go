package weft_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/workflow"
)

// childWorkflows registers the child workflow t/double (doubles input.n,
// failing while fail says so) and its parent t/order (quote, ship as a
// sub-workflow of t/double, done).
func childWorkflows(t *testing.T, e *weft.Engine, fail func() bool) {
	e.Handle("double", func(ctx context.Context, a *weft.Attempt) (any, error) {
		var in struct{ N float64 }
		if err := a.Bind(&in); err != nil {
			return nil, err
		}
		if fail() {
			return nil, weft.Permanent(errors.New("out of stock"))
		}
		return map[string]float64{"v": 2 * in.N}, nil
	})
	e.Handle("quote", func(ctx context.Context, a *weft.Attempt) (any, error) { return map[string]int{"amount": 5}, nil })
	e.Handle("done", func(ctx context.Context, a *weft.Attempt) (any, error) { return a.Deps["ship"], nil })
	register(t, e, workflow.New("t", "double", "1").Step("double", "double"))
	register(t, e, workflow.New("t", "order", "1").
		Step("quote", "quote").
		Step("ship", "", workflow.AsSubWorkflow("t/double", `{"n": deps.quote.amount}`), workflow.DependsOn("quote"),
			workflow.WithRetry(workflow.RetryPolicy{MaxAttempts: 2, Backoff: "fixed", Initial: workflow.Duration(10 * time.Millisecond)})).
		Step("done", "done", workflow.DependsOn("ship")))
}

// TestSubWorkflow: a workflow step starts a child task with input built
// from its dependencies, waits for it with no slot held, and takes the
// child's result; the tasks link both ways.
func TestSubWorkflow(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		// One slot: the waiting parent step must not hold it, or the
		// child could never run.
		e := newEngine(t, open(t), weft.Config{Concurrency: 1})
		childWorkflows(t, e, func() bool { return false })
		start(t, e)
		parent := wait(t, e, submit(t, e, weft.Submission{Workflow: "t/order"}).Task.ID)
		require.Equal(t, "completed", string(parent.State), parent.Error)
		ship := stepByName(t, parent, "ship")
		require.JSONEq(t, `{"double": {"v": 10}}`, string(ship.Result))
		require.JSONEq(t, `{"double": {"v": 10}}`, string(stepByName(t, parent, "done").Result))
		require.Len(t, parent.Children, 1)
		require.Equal(t, parent.Children[0], ship.ChildTaskID)
		child, err := e.Get(context.Background(), ship.ChildTaskID)
		require.NoError(t, err)
		require.Equal(t, parent.ID, child.ParentTaskID)
		require.Equal(t, "ship", child.ParentStep)
		require.Equal(t, 1, child.Depth)
		require.JSONEq(t, `{"n": 5}`, string(child.Input))
		require.Equal(t, "completed", string(child.State))
	})
}

// TestSubWorkflowRetry: a child that fails fails the step's attempt; the
// retry starts a new child, whose result completes the step. A step out of
// attempts fails its task.
func TestSubWorkflowRetry(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		e := newEngine(t, open(t), weft.Config{})
		var calls atomic.Int32
		failFirst := true
		childWorkflows(t, e, func() bool { return calls.Add(1) == 1 && failFirst })
		start(t, e)
		parent := wait(t, e, submit(t, e, weft.Submission{Workflow: "t/order"}).Task.ID)
		require.Equal(t, "completed", string(parent.State), parent.Error)
		require.Len(t, parent.Children, 2, "the retry started a second child")
		first, err := e.Get(context.Background(), parent.Children[0])
		require.NoError(t, err)
		require.Equal(t, "failed", string(first.State))
		ship := stepByName(t, parent, "ship")
		require.Equal(t, parent.Children[1], ship.ChildTaskID)
		require.Equal(t, 2, ship.Attempts)
		require.JSONEq(t, `{"double": {"v": 10}}`, string(ship.Result))
	})
}

// TestSubWorkflowFails: a step whose children keep failing fails for good
// once its attempts are used up, with the child's error.
func TestSubWorkflowFails(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		e := newEngine(t, open(t), weft.Config{})
		childWorkflows(t, e, func() bool { return true })
		start(t, e)
		parent := wait(t, e, submit(t, e, weft.Submission{Workflow: "t/order"}).Task.ID)
		require.Equal(t, "failed", string(parent.State))
		ship := stepByName(t, parent, "ship")
		require.Equal(t, "failed", string(ship.State))
		require.Contains(t, ship.Error, "out of stock")
		require.Contains(t, ship.Error, "attempt 2 of 2")
		require.Len(t, parent.Children, 2)
		require.Equal(t, "skipped", string(stepByName(t, parent, "done").State))
	})
}

// TestCancelParentCancelsChild: cancelling a parent cancels the child it
// waits for and stops the child's running handler.
func TestCancelParentCancelsChild(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		e := newEngine(t, open(t), weft.Config{})
		running := make(chan struct{})
		stopped := make(chan error, 1)
		e.Handle("block", func(ctx context.Context, a *weft.Attempt) (any, error) {
			close(running)
			<-ctx.Done()
			stopped <- context.Cause(ctx)
			return nil, ctx.Err()
		})
		register(t, e, workflow.New("t", "slow", "1").Step("block", "block"))
		register(t, e, workflow.New("t", "outer", "1").Step("call", "", workflow.AsSubWorkflow("t/slow", "")))
		start(t, e)
		id := submit(t, e, weft.Submission{Workflow: "t/outer", Input: map[string]int{"k": 1}}).Task.ID
		<-running
		require.NoError(t, e.CancelAs(context.Background(), id, weft.Operator{Actor: "test", Reason: "no longer needed"}))
		select {
		case err := <-stopped:
			require.Error(t, err)
		case <-time.After(20 * time.Second):
			t.Fatal("the child's handler was not stopped")
		}
		parent := wait(t, e, id)
		require.Equal(t, "cancelled", string(parent.State))
		child := wait(t, e, parent.Children[0])
		require.Equal(t, "cancelled", string(child.State))
		require.JSONEq(t, `{"k": 1}`, string(child.Input), "without an input expression the child gets the task's input")
	})
}

// TestStartChildFromHandler: a Go handler starts a child, waits for it with
// its slot released, and a second start of the same name finds the same
// child.
func TestStartChildFromHandler(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		e := newEngine(t, open(t), weft.Config{Concurrency: 1})
		childWorkflows(t, e, func() bool { return false })
		e.Handle("fanout", func(ctx context.Context, a *weft.Attempt) (any, error) {
			id, err := a.StartChild(ctx, "first", "t/double", map[string]int{"n": 21})
			if err != nil {
				return nil, err
			}
			again, err := a.StartChild(ctx, "first", "t/double", map[string]int{"n": 21})
			if err != nil {
				return nil, err
			}
			if again != id {
				return nil, weft.Permanent(errors.New("a second child of the same name"))
			}
			res, err := a.WaitChild(ctx, id, 10*time.Millisecond)
			if err != nil {
				return nil, err
			}
			return json.RawMessage(res), nil
		})
		register(t, e, workflow.New("t", "fan", "1").Step("go", "fanout"))
		start(t, e)
		parent := wait(t, e, submit(t, e, weft.Submission{Workflow: "t/fan"}).Task.ID)
		require.Equal(t, "completed", string(parent.State), parent.Error)
		require.JSONEq(t, `{"double": {"v": 42}}`, string(stepByName(t, parent, "go").Result))
		require.Len(t, parent.Children, 1)
	})
}

// TestSubWorkflowDepthLimit: workflows that start each other stop at the
// depth limit: the step that would go deeper fails, and the failure climbs
// back to the root.
func TestSubWorkflowDepthLimit(t *testing.T) {
	t.Parallel()
	// Two workflows that start each other stop at the depth their limits
	// allow: a set one, the default, and the most that may be set.
	for _, tt := range []struct {
		name           string
		maxDepth, want int
	}{
		{"set", 3, 3},
		{"default", 0, workflow.DefaultMaxDepth},
		{"upper bound", workflow.MaxDepthLimit, workflow.MaxDepthLimit},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			eachBackend(t, func(t *testing.T, open storeFactory) {
				e := newEngine(t, open(t), weft.Config{Concurrency: 4})
				once := workflow.WithRetry(workflow.RetryPolicy{MaxAttempts: 1})
				register(t, e, workflow.New("t", "ping", "1").WithLimits(workflow.Limits{MaxDepth: tt.maxDepth}).
					Step("call", "", workflow.AsSubWorkflow("t/pong", ""), once))
				register(t, e, workflow.New("t", "pong", "1").WithLimits(workflow.Limits{MaxDepth: tt.maxDepth}).
					Step("call", "", workflow.AsSubWorkflow("t/ping", ""), once))
				start(t, e)
				root := wait(t, e, submit(t, e, weft.Submission{Workflow: "t/ping"}).Task.ID)
				require.Equal(t, "failed", string(root.State))
				// Down the chain to the deepest task, whose step failed.
				task, tasks := root, 1
				for len(task.Children) > 0 {
					require.Len(t, task.Children, 1, "one child a task")
					var err error
					task, err = e.Get(context.Background(), task.Children[0])
					require.NoError(t, err)
					tasks++
				}
				require.Equal(t, tt.want, task.Depth)
				require.Equal(t, tt.want+1, tasks)
				require.Contains(t, task.Steps[0].Error, fmt.Sprintf("a child task would be at depth %d, more than limits.max_depth (%d)", tt.want+1, tt.want))
			})
		})
	}
}
