package weftest_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/weftest"
	"github.com/weftrun/weft/workflow"
)

// exampleT stands for the *testing.T a test has and an example has not:
// it prints failures instead of ending the test, and runs its cleanups
// (stopping the engine, removing its files) when the example calls done.
type exampleT struct{ cleanups []func() }

func (t *exampleT) Helper()                           {}
func (t *exampleT) Logf(format string, args ...any)   {}
func (t *exampleT) Errorf(format string, args ...any) { fmt.Printf("FAIL: "+format+"\n", args...) }
func (t *exampleT) Fatalf(format string, args ...any) { fmt.Printf("FAIL: "+format+"\n", args...) }
func (t *exampleT) Cleanup(fn func())                 { t.cleanups = append(t.cleanups, fn) }

func (t *exampleT) TempDir() string {
	dir, err := os.MkdirTemp("", "weftest-example")
	if err != nil {
		panic(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func (t *exampleT) done() {
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
}

// A test registers its handlers and workflow on a harness, runs one task
// to its end and checks the steps. (In a test, t is the test's
// *testing.T.)
func ExampleNew() {
	t := &exampleT{}
	defer t.done()
	ctx := context.Background()

	h := weftest.New(t)
	h.Handle("shop.price", weft.Typed(func(ctx context.Context, a *weft.Attempt, in struct{ Item string }) (map[string]int, error) {
		return map[string]int{"cents": 100 * len(in.Item)}, nil
	}))
	h.Handle("shop.invoice", func(ctx context.Context, a *weft.Attempt) (any, error) {
		var price struct{ Cents int }
		if err := a.Dep("price", &price); err != nil {
			return nil, err
		}
		return fmt.Sprintf("invoice for %d cents", price.Cents), nil
	})
	wf := workflow.New("shop", "checkout", "1").
		Step("price", "shop.price").
		Step("invoice", "shop.invoice", workflow.DependsOn("price"))

	res := h.RunWorkflow(ctx, wf, map[string]string{"item": "teapot"})

	res.RequireCompleted(t)
	res.RequireStep(t, "price").Completed().Attempts(1).ResultJSON(`{"cents": 600}`)
	res.RequireStep(t, "invoice").Completed().ResultJSON(`"invoice for 600 cents"`)
	fmt.Println(res)
	// Output:
	// shop/checkout@1 completed
	//   price    completed  attempts 1/3  result {"cents":600}
	//   invoice  completed  attempts 1/3  result "invoice for 600 cents"
}

// A workflow loaded from YAML runs under the harness like one built in Go;
// here a decision routes small and large orders differently.
func ExampleHarness_RegisterYAML() {
	t := &exampleT{}
	defer t.done()
	ctx := context.Background()

	h := weftest.New(t)
	h.Handle("route", func(ctx context.Context, a *weft.Attempt) (any, error) {
		var in struct{ Amount int }
		if err := a.Bind(&in); err != nil {
			return nil, err
		}
		if in.Amount > 1000 {
			return map[string]any{"branches": []string{"review"}}, nil
		}
		return map[string]any{"branches": []string{"ship"}}, nil
	})
	h.Handle("done", func(ctx context.Context, a *weft.Attempt) (any, error) { return a.Step, nil })
	h.RegisterYAML(`
namespace: shop
name: order
version: "1"
steps:
  - name: route
    handler: route
    type: decision
  - name: ship
    handler: done
    depends_on: [route]
  - name: review
    handler: done
    depends_on: [route]
`)
	for _, amount := range []int{20, 5000} {
		res := h.Run(ctx, "shop/order", map[string]int{"amount": amount}).RequireCompleted(t)
		fmt.Println(res)
	}
	// Output:
	// shop/order@1 completed
	//   route   completed  attempts 1/3  result {"branches":["ship"]}
	//   ship    completed  attempts 1/3  result "ship"
	//   review  skipped    attempts 0/3  (not chosen by decision "route")
	// shop/order@1 completed
	//   route   completed  attempts 1/3  result {"branches":["review"]}
	//   ship    skipped    attempts 0/3  (not chosen by decision "route")
	//   review  completed  attempts 1/3  result "review"
}

// Submit and Wait split Run in two, so that a test can act on the task
// while it runs: here, send the signal it waits for.
func ExampleHarness_Wait() {
	t := &exampleT{}
	defer t.done()
	ctx := context.Background()

	h := weftest.New(t)
	h.Handle("ship", func(ctx context.Context, a *weft.Attempt) (any, error) { return "shipped", nil })
	h.Register(workflow.New("shop", "approval", "1").
		Step("approve", "", workflow.AwaitSignal("approval", time.Hour)).
		Step("ship", "ship", workflow.DependsOn("approve")))

	sub := h.Submit(ctx, weft.Submission{Workflow: "shop/approval"})
	if _, err := h.Engine().Signal(ctx, sub.Task.ID, "approval", map[string]string{"by": "ada"}); err != nil {
		t.Fatalf("signal: %v", err)
	}
	res := h.Wait(ctx, sub.Task.ID).RequireCompleted(t)

	res.RequireStep(t, "approve").ResultJSON(`{"signal": "approval", "payload": {"by": "ada"}}`)
	fmt.Println(res)
	// Output:
	// shop/approval@1 completed
	//   approve  completed  signal "approval"  result {"signal":"approval","payload":{"by":"ada"}}
	//   ship     completed  attempts 1/3  result "shipped"
}

// Transitions lists a step's audit trail, and StepAssert.Transition checks
// one entry of it: here, that the step was retried after a failure.
func ExampleResult_Transitions() {
	t := &exampleT{}
	defer t.done()

	h := weftest.New(t)
	h.Handle("flaky", func(ctx context.Context, a *weft.Attempt) (any, error) {
		if a.Number == 1 {
			return nil, errors.New("connection reset")
		}
		return "ok", nil
	})
	retry := workflow.RetryPolicy{Backoff: "fixed", Initial: workflow.Duration(100 * time.Millisecond)}
	res := h.RunWorkflow(context.Background(), workflow.New("net", "fetch", "1").
		Step("fetch", "flaky", workflow.WithRetry(retry)), nil)

	res.RequireStep(t, "fetch").Completed().Attempts(2).Transition(state.StepRunning, state.StepWaiting)
	fmt.Println(strings.Join(res.Transitions("fetch"), "\n"))
	// Output:
	// new -> ready (submitted)
	// ready -> running (claimed)
	// running -> waiting (retry scheduled: connection reset)
	// waiting -> ready (run_at reached)
	// ready -> running (claimed)
	// running -> completed
}

// A failed check says what it wanted, what it found, and where every step
// of the task stands. (Here t prints the failure; a test's t reports it
// and ends the test.)
func ExampleStepAssert() {
	t := &exampleT{}
	defer t.done()

	h := weftest.New(t)
	h.Handle("charge", func(ctx context.Context, a *weft.Attempt) (any, error) {
		return nil, weft.Permanent(errors.New("card declined"))
	})
	h.Handle("ship", func(ctx context.Context, a *weft.Attempt) (any, error) { return "shipped", nil })
	res := h.RunWorkflow(context.Background(), workflow.New("shop", "checkout", "1").
		Step("charge", "charge").
		Step("ship", "ship", workflow.DependsOn("charge")), nil)

	res.RequireStep(t, "charge").Failed().ErrorContains("declined") // holds
	res.RequireStep(t, "ship").Completed()                          // does not
	// Output:
	// FAIL: weftest: step "ship" of task 1 is skipped, want completed; last transition: dependency "charge" failed
	//     task 1: shop/checkout@1 failed
	//       charge  failed   attempts 1/3  error: permanent: card declined
	//       ship    skipped  attempts 0/3  (dependency "charge" failed)
}
