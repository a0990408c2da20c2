package weft_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/workflow"
)

type order struct {
	ID     string `json:"id"`
	Amount int    `json:"amount"`
}

type receipt struct {
	Charge string `json:"charge"`
	Label  string `json:"label"`
	Total  int    `json:"total"`
}

// ranCounter counts how many times each call's code ran.
type ranCounter struct {
	mu  sync.Mutex
	ran map[string]int
}

func (c *ranCounter) add(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ran == nil {
		c.ran = map[string]int{}
	}
	c.ran[name]++
}

func (c *ranCounter) get() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for k, v := range c.ran {
		out[k] = v
	}
	return out
}

// TestFunctionRunsItsCallsOnce: a durable function with sequential steps,
// parallel steps joined, a durable sleep and a signal completes with its
// result, each call is a step of its task, and each call's code ran once.
func TestFunctionRunsItsCallsOnce(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		ctx := context.Background()
		e := newEngine(t, open(t), weft.Config{Concurrency: 4})
		var ran ranCounter
		var function atomic.Int32
		err := weft.RegisterFunc(ctx, e, "shop/checkout", func(ctx weft.FuncContext, in order) (receipt, error) {
			function.Add(1)
			charge, err := weft.Step(ctx, "charge", func(context.Context) (string, error) {
				ran.add("charge")
				return "ch_" + in.ID, nil
			})
			if err != nil {
				return receipt{}, err
			}
			label := weft.Go(ctx, "label", func(context.Context) (string, error) { ran.add("label"); return "lb_" + in.ID, nil })
			tax := weft.Go(ctx, "tax", func(context.Context) (int, error) { ran.add("tax"); return in.Amount / 10, nil })
			l, err := label.Get()
			if err != nil {
				return receipt{}, err
			}
			tx, err := tax.Get()
			if err != nil {
				return receipt{}, err
			}
			if err := ctx.Sleep(50 * time.Millisecond); err != nil {
				return receipt{}, err
			}
			payload, err := ctx.WaitSignal("approved", time.Minute)
			if err != nil {
				return receipt{}, err
			}
			var ok bool
			if err := json.Unmarshal(payload, &ok); err != nil || !ok {
				return receipt{}, weft.Permanent(fmt.Errorf("not approved: %s", payload))
			}
			return receipt{Charge: charge, Label: l, Total: in.Amount + tx}, nil
		})
		require.NoError(t, err)
		start(t, e)
		id := submit(t, e, weft.Submission{Workflow: "shop/checkout", Input: order{ID: "o1", Amount: 100}}).Task.ID
		_, err = e.Signal(ctx, id, "approved", true)
		require.NoError(t, err)
		task := wait(t, e, id)
		require.Equal(t, state.TaskCompleted, task.State, "%+v", task.Steps)
		var names []string
		for _, s := range task.Steps {
			names = append(names, s.Name)
			require.Equal(t, state.StepCompleted, s.State, s.Name)
		}
		require.Equal(t, []string{"function", "charge", "label", "tax", "sleep", "approved"}, names)
		require.JSONEq(t, `{"charge":"ch_o1","label":"lb_o1","total":110}`, string(task.Steps[0].Result))
		require.Equal(t, map[string]int{"charge": 1, "label": 1, "tax": 1}, ran.get())
		require.Equal(t, 1, task.Steps[0].Attempts, "waiting for calls gives the attempt back")
	})
}

// TestFunctionNonDeterminism: a function whose calls differ from those
// its task recorded fails the task, naming the call.
func TestFunctionNonDeterminism(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		ctx := context.Background()
		e := newEngine(t, open(t), weft.Config{})
		var runs atomic.Int32
		require.NoError(t, weft.RegisterFunc(ctx, e, "shop/drift", func(ctx weft.FuncContext, in struct{}) (string, error) {
			name := "first"
			if runs.Add(1) > 1 {
				name = "second" // the code changed under a running task
			}
			_, err := weft.Step(ctx, name, func(context.Context) (int, error) { return 1, nil })
			return name, err
		}))
		start(t, e)
		id := submit(t, e, weft.Submission{Workflow: "shop/drift"}).Task.ID
		task := wait(t, e, id)
		require.Equal(t, state.TaskFailed, task.State)
		require.Contains(t, task.Steps[0].Error, `non-determinism: call 1 is step "second", but the task recorded step "first" there`)
	})
}

// TestFunctionCallFails: a call whose step fails for good returns a
// *weft.CallError; a function that handles it goes on, and one that
// returns it fails its task at once.
func TestFunctionCallFails(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		ctx := context.Background()
		e := newEngine(t, open(t), weft.Config{})
		var attempts atomic.Int32
		require.NoError(t, weft.RegisterFunc(ctx, e, "shop/refund", func(ctx weft.FuncContext, in struct{ Handle bool }) (string, error) {
			_, err := weft.Step(ctx, "charge", func(context.Context) (int, error) {
				attempts.Add(1)
				return 0, errors.New("card declined")
			}, workflow.WithRetry(workflow.RetryPolicy{MaxAttempts: 2, Initial: workflow.Duration(time.Millisecond)}))
			var ce *weft.CallError
			if !errors.As(err, &ce) {
				return "", fmt.Errorf("want a CallError, got %v", err)
			}
			if in.Handle {
				return weft.Step(ctx, "notify", func(context.Context) (string, error) { return "told the customer", nil })
			}
			return "", err
		}))
		start(t, e)
		handled := submit(t, e, weft.Submission{Workflow: "shop/refund", Input: map[string]bool{"handle": true}}).Task.ID
		passed := submit(t, e, weft.Submission{Workflow: "shop/refund", Input: map[string]bool{"handle": false}}).Task.ID
		task := wait(t, e, handled)
		require.Equal(t, state.TaskFailed, task.State, "a failed call fails its task, as any failed step does")
		require.JSONEq(t, `"told the customer"`, string(task.Steps[0].Result))
		task = wait(t, e, passed)
		require.Equal(t, state.TaskFailed, task.State)
		require.Contains(t, task.Steps[0].Error, `call "charge" failed: card declined (attempt 2 of 2)`)
		require.Equal(t, 1, task.Steps[0].Attempts, "a failed call fails the function without retrying it")
		require.EqualValues(t, 4, attempts.Load())
	})
}

// TestFunctionChildAndResume: a function that starts a child task gets
// its result; a function whose engine stops while it sleeps resumes on
// another engine from its last finished call, and no finished call runs
// again.
func TestFunctionChildAndResume(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		ctx := context.Background()
		s := open(t)
		var ran ranCounter
		slept := make(chan struct{}, 1)
		register := func(e *weft.Engine) {
			e.Handle("double", func(ctx context.Context, a *weft.Attempt) (any, error) {
				var in struct{ N int }
				if err := a.Bind(&in); err != nil {
					return nil, err
				}
				return in.N * 2, nil
			})
			require.NoError(t, e.Register(ctx, workflow.New("math", "double", "1").Step("double", "double")))
			require.NoError(t, weft.RegisterFunc(ctx, e, "math/pipeline", func(ctx weft.FuncContext, in struct{ N int }) (int, error) {
				a, err := weft.Step(ctx, "add", func(context.Context) (int, error) { ran.add("add"); return in.N + 1, nil })
				if err != nil {
					return 0, err
				}
				select {
				case slept <- struct{}{}:
				default:
				}
				if err := ctx.Sleep(300 * time.Millisecond); err != nil {
					return 0, err
				}
				child, err := weft.Child[map[string]int](ctx, "math/double", map[string]int{"n": a})
				if err != nil {
					return 0, err
				}
				return weft.Step(ctx, "square", func(context.Context) (int, error) {
					ran.add("square")
					return child["double"] * child["double"], nil
				})
			}))
		}
		first := newEngine(t, s, weft.Config{ID: "first"})
		register(first)
		require.NoError(t, first.Start(ctx))
		id := submit(t, first, weft.Submission{Workflow: "math/pipeline", Input: map[string]int{"n": 2}}).Task.ID
		<-slept
		require.NoError(t, first.Stop(ctx))

		second := newEngine(t, s, weft.Config{ID: "second"})
		register(second)
		start(t, second)
		task := wait(t, second, id)
		require.Equal(t, state.TaskCompleted, task.State, "%+v", task.Steps)
		require.JSONEq(t, `36`, string(task.Steps[0].Result)) // ((2+1)*2)^2
		require.Equal(t, map[string]int{"add": 1, "square": 1}, ran.get())
		var names []string
		for _, st := range task.Steps {
			names = append(names, st.Name)
		}
		require.Equal(t, []string{"function", "add", "sleep", "double", "square"}, names)
		require.NotZero(t, task.Steps[3].ChildTaskID)
	})
}

// TestFunctionPolicies: a function's calls are bounded by its limits, and
// its tasks by its concurrency limit.
func TestFunctionPolicies(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		ctx := context.Background()
		e := newEngine(t, open(t), weft.Config{Concurrency: 8})
		require.NoError(t, weft.RegisterFunc(ctx, e, "shop/loop", func(ctx weft.FuncContext, in struct{}) (int, error) {
			for i := 0; ; i++ {
				if _, err := weft.Step(ctx, "poll", func(context.Context) (int, error) { return i, nil }); err != nil {
					return 0, err
				}
			}
		}, weft.FuncLimits(workflow.Limits{MaxSteps: 4})))
		var running, peak atomic.Int32
		release := make(chan struct{})
		require.NoError(t, weft.RegisterFunc(ctx, e, "shop/one-at-a-time", func(ctx weft.FuncContext, in struct{}) (int, error) {
			return weft.Step(ctx, "work", func(ctx context.Context) (int, error) {
				n := running.Add(1)
				defer running.Add(-1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				return 1, hold(ctx, release)
			})
		}, weft.FuncConcurrency(1, "")))
		start(t, e)
		loop := submit(t, e, weft.Submission{Workflow: "shop/loop"}).Task.ID
		task := wait(t, e, loop)
		require.Equal(t, state.TaskFailed, task.State)
		require.Contains(t, task.Steps[0].Error, "the function made 4 calls: its task would have more than 4 steps (limits.max_steps)")
		require.Len(t, task.Steps, 4)

		ids := []int64{
			submit(t, e, weft.Submission{Workflow: "shop/one-at-a-time"}).Task.ID,
			submit(t, e, weft.Submission{Workflow: "shop/one-at-a-time"}).Task.ID,
		}
		eventually(t, "one call running", func() bool { return running.Load() == 1 })
		rep, err := e.Policies(ctx)
		require.NoError(t, err)
		require.Contains(t, rep.Limits, weft.LimitUsage{Key: "workflow:shop/one-at-a-time", Limit: 1, Running: 1})
		close(release)
		for _, id := range ids {
			require.Equal(t, state.TaskCompleted, wait(t, e, id).State)
		}
		require.EqualValues(t, 1, peak.Load(), "two tasks of a function limited to one ran at once")
	})
}

// TestFunctionVersionsCancelAndRetry: a task stays on the version of the
// function it was submitted to; cancelling a task stops its running call
// and its function; an operator's retry of a failed task runs its failed
// call again, and the function goes on from there.
func TestFunctionVersionsCancelAndRetry(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		ctx := context.Background()
		e := newEngine(t, open(t), weft.Config{})
		v1 := func(ctx weft.FuncContext, _ struct{}) (string, error) {
			return weft.Step(ctx, "old", func(context.Context) (string, error) { return "v1", nil })
		}
		v2 := func(ctx weft.FuncContext, _ struct{}) (string, error) {
			return weft.Step(ctx, "new", func(context.Context) (string, error) { return "v2", nil })
		}
		require.NoError(t, weft.RegisterFunc(ctx, e, "shop/versioned", v1))
		old := submit(t, e, weft.Submission{Workflow: "shop/versioned"}).Task.ID
		require.NoError(t, weft.RegisterFunc(ctx, e, "shop/versioned", v2, weft.FuncVersion("2")))
		cur := submit(t, e, weft.Submission{Workflow: "shop/versioned"}).Task.ID

		started, stopped := make(chan struct{}), make(chan error, 1)
		var after atomic.Bool
		require.NoError(t, weft.RegisterFunc(ctx, e, "shop/cancelled", func(ctx weft.FuncContext, _ struct{}) (int, error) {
			_, err := weft.Step(ctx, "block", func(ctx context.Context) (int, error) {
				close(started)
				<-ctx.Done()
				stopped <- context.Cause(ctx)
				return 0, ctx.Err()
			})
			after.Store(true)
			return 0, err
		}))
		var tries atomic.Int32
		require.NoError(t, weft.RegisterFunc(ctx, e, "shop/retried", func(ctx weft.FuncContext, _ struct{}) (string, error) {
			v, err := weft.Step(ctx, "flaky", func(context.Context) (string, error) {
				if tries.Add(1) == 1 {
					return "", errors.New("down")
				}
				return "up", nil
			}, workflow.WithRetry(workflow.RetryPolicy{MaxAttempts: 1}))
			if err != nil {
				return "", err
			}
			return weft.Step(ctx, "then", func(context.Context) (string, error) { return "after " + v, nil })
		}))
		start(t, e)

		require.JSONEq(t, `"v1"`, string(wait(t, e, old).Steps[0].Result))
		require.JSONEq(t, `"v2"`, string(wait(t, e, cur).Steps[0].Result))

		cancelled := submit(t, e, weft.Submission{Workflow: "shop/cancelled"}).Task.ID
		<-started
		require.NoError(t, e.Cancel(ctx, cancelled))
		select {
		case err := <-stopped:
			require.Error(t, err)
		case <-time.After(20 * time.Second):
			t.Fatal("the cancelled task's call kept running")
		}
		task := wait(t, e, cancelled)
		require.Equal(t, state.TaskCancelled, task.State)
		require.False(t, after.Load(), "the function went on after its task was cancelled")

		retried := submit(t, e, weft.Submission{Workflow: "shop/retried"}).Task.ID
		task = wait(t, e, retried)
		require.Equal(t, state.TaskFailed, task.State)
		require.NoError(t, e.Retry(ctx, retried))
		task = wait(t, e, retried)
		require.Equal(t, state.TaskCompleted, task.State, "%+v", task.Steps)
		require.JSONEq(t, `"after up"`, string(task.Steps[0].Result))
	})
}

// TestFunctionResumesInTheCallsWrite: on the engine that runs its calls, a
// function of sequential calls goes on to its next call, and at the end
// returns, in the write that records the last call's end: its step is
// claimed only to start and to return, and the trail says why it waits at
// each call.
func TestFunctionResumesInTheCallsWrite(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		ctx := context.Background()
		e := newEngine(t, open(t), weft.Config{Concurrency: 2})
		var ran ranCounter
		err := weft.RegisterFunc(ctx, e, "shop/chain", func(ctx weft.FuncContext, in order) (int, error) {
			total := in.Amount
			for _, name := range []string{"one", "two", "three"} {
				v, err := weft.Step(ctx, name, func(context.Context) (int, error) { ran.add(name); return total + 1, nil })
				if err != nil {
					return 0, err
				}
				total = v
			}
			if err := ctx.Sleep(10 * time.Millisecond); err != nil {
				return 0, err
			}
			return weft.Step(ctx, "last", func(context.Context) (int, error) { ran.add("last"); return total * 2, nil })
		})
		require.NoError(t, err)
		start(t, e)
		id := submit(t, e, weft.Submission{Workflow: "shop/chain", Input: order{ID: "o1", Amount: 1}}).Task.ID
		task := wait(t, e, id)
		require.Equal(t, state.TaskCompleted, task.State, "%+v", task.Steps)
		require.JSONEq(t, `8`, string(task.Steps[0].Result))
		require.Equal(t, map[string]int{"one": 1, "two": 1, "three": 1, "last": 1}, ran.get())
		trail, err := e.Audit(ctx, id)
		require.NoError(t, err)
		var claims, ends int
		var waits []string
		for _, a := range trail {
			if a.Step != "function" {
				continue
			}
			switch {
			case a.To == string(state.StepRunning):
				claims++
			case a.From == string(state.StepRunning):
				ends++
			}
			if a.To == string(state.StepWaiting) {
				waits = append(waits, a.Reason)
			}
		}
		require.Equal(t, 2, claims, "the function step runs to start and to return: %+v", trail)
		require.Equal(t, claims, ends, "each run of the function step is claimed and ends: %+v", trail)
		last := trail[len(trail)-2]
		require.Equal(t, []string{"function", string(state.StepCompleted), "the function returned"}, []string{last.Step, last.To, last.Reason},
			"it returned in the last call's write: %+v", trail)
		require.Equal(t, []string{"waiting for call(s) one", "waiting for call(s) two", "waiting for call(s) three",
			"waiting for call(s) sleep", "waiting for call(s) last"}, waits)
	})
}
