package weft_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/weftdb"
	"github.com/weftrun/weft/workflow"
)

// exampleEngine opens an engine on a fresh SQLite file; stop closes both.
func exampleEngine(ctx context.Context) (e *weft.Engine, stop func()) {
	dir, _ := os.MkdirTemp("", "weft-example")
	db, err := weftdb.Open(ctx, filepath.Join(dir, "weft.db"), weftdb.Options{})
	if err != nil {
		log.Fatal(err)
	}
	e, err = weft.New(db, weft.Config{Logger: quietLogger()})
	if err != nil {
		log.Fatal(err)
	}
	return e, func() {
		e.Stop(ctx)
		db.Close()
		os.RemoveAll(dir)
	}
}

// A durable function: plain Go whose calls through weft are steps of its
// task. After a crash it runs again from the top, and each finished call
// returns its recorded result instead of running again.
func ExampleRegisterFunc() {
	ctx := context.Background()
	e, stop := exampleEngine(ctx)
	defer stop()

	type order struct{ ID string }
	err := weft.RegisterFunc(ctx, e, "shop/checkout", func(ctx weft.FuncContext, o order) (string, error) {
		charge, err := weft.Step(ctx, "charge", func(ctx context.Context) (string, error) {
			return "ch_" + o.ID, nil // call the payment provider here
		}, workflow.WithRetry(workflow.RetryPolicy{MaxAttempts: 5}))
		if err != nil {
			return "", err
		}
		return weft.Step(ctx, "ship", func(ctx context.Context) (string, error) {
			return "shipped after " + charge, nil
		})
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		log.Fatal(err)
	}
	res, err := e.Submit(ctx, weft.Submission{Workflow: "shop/checkout", Input: order{ID: "A-1"}})
	if err != nil {
		log.Fatal(err)
	}
	task, err := e.Wait(ctx, res.Task.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(task.State)
	for _, s := range task.Steps {
		fmt.Println(s.Name, s.State, string(s.Result))
	}
	// Output:
	// completed
	// function completed "shipped after ch_A-1"
	// charge completed "ch_A-1"
	// ship completed "shipped after ch_A-1"
}

// Go starts calls that run in parallel, on any engine with free slots;
// Get joins them.
func ExampleGo() {
	ctx := context.Background()
	e, stop := exampleEngine(ctx)
	defer stop()

	err := weft.RegisterFunc(ctx, e, "shop/quote", func(ctx weft.FuncContext, in struct{ Weight int }) (int, error) {
		var quotes []*weft.Future[int]
		for i, carrier := range []string{"dhl", "ups", "fedex"} {
			quotes = append(quotes, weft.Go(ctx, carrier, func(ctx context.Context) (int, error) {
				return in.Weight*10 + i, nil // ask the carrier here
			}))
		}
		best := -1
		for _, q := range quotes {
			price, err := q.Get()
			if err != nil {
				return 0, err
			}
			if best < 0 || price < best {
				best = price
			}
		}
		return best, nil
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		log.Fatal(err)
	}
	res, err := e.Submit(ctx, weft.Submission{Workflow: "shop/quote", Input: map[string]int{"weight": 3}})
	if err != nil {
		log.Fatal(err)
	}
	task, err := e.Wait(ctx, res.Task.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(task.State, string(task.Steps[0].Result), len(task.Steps)-1, "calls")
	// Output: completed 30 3 calls
}

// Sleep waits durably: the function holds no slot and no goroutine until
// the time has passed, even across a restart.
func ExampleFuncContext_Sleep() {
	ctx := context.Background()
	e, stop := exampleEngine(ctx)
	defer stop()

	err := weft.RegisterFunc(ctx, e, "billing/dunning", func(ctx weft.FuncContext, in struct{}) (string, error) {
		if err := ctx.Sleep(100 * time.Millisecond); err != nil { // days, in real life
			return "", err
		}
		return weft.Step(ctx, "remind", func(ctx context.Context) (string, error) { return "reminder sent", nil })
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		log.Fatal(err)
	}
	res, err := e.Submit(ctx, weft.Submission{Workflow: "billing/dunning"})
	if err != nil {
		log.Fatal(err)
	}
	task, err := e.Wait(ctx, res.Task.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(task.Steps[1].Name, task.Steps[1].State)
	fmt.Println(string(task.Steps[0].Result))
	// Output:
	// sleep completed
	// "reminder sent"
}

// WaitSignal waits durably for a signal: here a person's approval, sent
// with Engine.Signal (or "weft signal", or the API).
func ExampleFuncContext_WaitSignal() {
	ctx := context.Background()
	e, stop := exampleEngine(ctx)
	defer stop()

	err := weft.RegisterFunc(ctx, e, "shop/refund", func(ctx weft.FuncContext, in struct{ Amount int }) (string, error) {
		payload, err := ctx.WaitSignal("approval", 24*time.Hour)
		if err != nil {
			return "", err // the day passed without an answer
		}
		return "refund approved: " + string(payload), nil
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		log.Fatal(err)
	}
	res, err := e.Submit(ctx, weft.Submission{Workflow: "shop/refund", Input: map[string]int{"amount": 90}})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := e.Signal(ctx, res.Task.ID, "approval", map[string]string{"by": "ada"}); err != nil {
		log.Fatal(err)
	}
	task, err := e.Wait(ctx, res.Task.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(task.Steps[0].Result))
	// Output: "refund approved: {\"by\":\"ada\"}"
}

// Child starts a task of another workflow (a DAG or another function)
// and waits for its result, holding no slot meanwhile.
func ExampleChild() {
	ctx := context.Background()
	e, stop := exampleEngine(ctx)
	defer stop()

	e.Handle("label", func(ctx context.Context, a *weft.Attempt) (any, error) { return "label for " + string(a.Input), nil })
	if err := e.Register(ctx, workflow.New("shop", "label", "1").Step("print", "label")); err != nil {
		log.Fatal(err)
	}
	err := weft.RegisterFunc(ctx, e, "shop/fulfil", func(ctx weft.FuncContext, in struct{ Order int }) (string, error) {
		label, err := weft.Child[map[string]string](ctx, "shop/label", map[string]int{"order": in.Order})
		if err != nil {
			return "", err
		}
		return label["print"], nil
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		log.Fatal(err)
	}
	res, err := e.Submit(ctx, weft.Submission{Workflow: "shop/fulfil", Input: map[string]int{"order": 7}})
	if err != nil {
		log.Fatal(err)
	}
	task, err := e.Wait(ctx, res.Task.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(task.Steps[0].Result))
	// Output: "label for {\"order\":7}"
}
