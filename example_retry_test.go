package weft_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/weftdb"
	"github.com/weftrun/weft/workflow"
)

// A failed attempt is retried under the step's policy until its attempts
// are used up; the step then fails, and so does its task.
func Example_retryPolicy() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "weft-example")
	defer os.RemoveAll(dir)
	db, err := weftdb.Open(ctx, filepath.Join(dir, "weft.db"), weftdb.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	e, err := weft.New(db, weft.Config{Logger: quietLogger()})
	if err != nil {
		log.Fatal(err)
	}
	defer e.Stop(ctx)

	e.Handle("net.fetch", func(ctx context.Context, a *weft.Attempt) (any, error) {
		fmt.Println("attempt", a.Number)
		return nil, errors.New("host unreachable")
	})
	// Three attempts, 10ms apart (the default is exponential from 1s).
	policy := workflow.RetryPolicy{MaxAttempts: 3, Backoff: "fixed", Initial: workflow.Duration(10 * time.Millisecond)}
	if err := e.Register(ctx, workflow.New("net", "fetch", "1").Step("fetch", "net.fetch", workflow.WithRetry(policy))); err != nil {
		log.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		log.Fatal(err)
	}
	res, err := e.Submit(ctx, weft.Submission{Workflow: "net/fetch"})
	if err != nil {
		log.Fatal(err)
	}
	task, err := e.Wait(ctx, res.Task.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(task.State, task.Steps[0].Attempts, task.Steps[0].Error)
	// Output:
	// attempt 1
	// attempt 2
	// attempt 3
	// failed 3 host unreachable (attempt 3 of 3)
}

// An error wrapped in Permanent fails the step at once, whatever attempts
// its retry policy has left.
func ExamplePermanent() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "weft-example")
	defer os.RemoveAll(dir)
	db, err := weftdb.Open(ctx, filepath.Join(dir, "weft.db"), weftdb.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	e, err := weft.New(db, weft.Config{Logger: quietLogger()})
	if err != nil {
		log.Fatal(err)
	}
	defer e.Stop(ctx)

	e.Handle("shop.charge", func(ctx context.Context, a *weft.Attempt) (any, error) {
		// Retrying will not make the card valid.
		return nil, weft.Permanent(errors.New("card declined"))
	})
	wf := workflow.New("shop", "charge", "1").
		Step("charge", "shop.charge", workflow.WithRetry(workflow.RetryPolicy{MaxAttempts: 5}))
	if err := e.Register(ctx, wf); err != nil {
		log.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		log.Fatal(err)
	}
	res, err := e.Submit(ctx, weft.Submission{Workflow: "shop/charge"})
	if err != nil {
		log.Fatal(err)
	}
	task, err := e.Wait(ctx, res.Task.ID)
	if err != nil {
		log.Fatal(err)
	}
	s := task.Steps[0]
	fmt.Printf("%s after %d of %d attempts: %s\n", s.State, s.Attempts, s.MaxAttempts, s.Error)
	// Output:
	// failed after 1 of 5 attempts: permanent: card declined
}

// RetryAfter fails the attempt and picks when the next one runs, for a
// service that says how long to wait (HTTP 429 with Retry-After); the
// policy's attempts still count.
func ExampleRetryAfter() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "weft-example")
	defer os.RemoveAll(dir)
	db, err := weftdb.Open(ctx, filepath.Join(dir, "weft.db"), weftdb.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	e, err := weft.New(db, weft.Config{Logger: quietLogger()})
	if err != nil {
		log.Fatal(err)
	}
	defer e.Stop(ctx)

	e.Handle("api.call", func(ctx context.Context, a *weft.Attempt) (any, error) {
		if a.Number == 1 {
			return nil, weft.RetryAfter(50*time.Millisecond, errors.New("429 too many requests"))
		}
		return "200 ok", nil
	})
	if err := e.Register(ctx, workflow.New("api", "call", "1").Step("call", "api.call")); err != nil {
		log.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		log.Fatal(err)
	}
	res, err := e.Submit(ctx, weft.Submission{Workflow: "api/call"})
	if err != nil {
		log.Fatal(err)
	}
	task, err := e.Wait(ctx, res.Task.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(task.State, task.Steps[0].Attempts, string(task.Steps[0].Result))
	audit, err := e.Audit(ctx, task.ID)
	if err != nil {
		log.Fatal(err)
	}
	for _, a := range audit {
		if strings.HasPrefix(a.Reason, "retry") {
			fmt.Println(a.Reason)
		}
	}
	// Output:
	// completed 2 "200 ok"
	// retry scheduled: retry after 50ms: 429 too many requests
}

// Retry runs a failed task again from its failed steps, once what made
// them fail is fixed; the steps that completed do not run again.
func ExampleEngine_Retry() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "weft-example")
	defer os.RemoveAll(dir)
	db, err := weftdb.Open(ctx, filepath.Join(dir, "weft.db"), weftdb.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	e, err := weft.New(db, weft.Config{Logger: quietLogger()})
	if err != nil {
		log.Fatal(err)
	}
	defer e.Stop(ctx)

	var inStock atomic.Bool
	e.Handle("shop.reserve", func(ctx context.Context, a *weft.Attempt) (any, error) {
		fmt.Println("reserve runs")
		return "reserved", nil
	})
	e.Handle("shop.pick", func(ctx context.Context, a *weft.Attempt) (any, error) {
		if !inStock.Load() {
			return nil, weft.Permanent(errors.New("out of stock"))
		}
		return "picked", nil
	})
	wf := workflow.New("shop", "fulfil", "1").
		Step("reserve", "shop.reserve").
		Step("pick", "shop.pick", workflow.DependsOn("reserve"))
	if err := e.Register(ctx, wf); err != nil {
		log.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		log.Fatal(err)
	}
	res, err := e.Submit(ctx, weft.Submission{Workflow: "shop/fulfil"})
	if err != nil {
		log.Fatal(err)
	}
	task, err := e.Wait(ctx, res.Task.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(task.State, task.Error)

	inStock.Store(true) // the delivery arrived
	if err := e.Retry(ctx, task.ID); err != nil {
		log.Fatal(err)
	}
	task, err = e.Wait(ctx, task.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(task.State)
	for _, s := range task.Steps {
		fmt.Println(s.Name, s.State, string(s.Result))
	}
	// Output:
	// reserve runs
	// failed step "pick" failed: permanent: out of stock
	// completed
	// reserve completed "reserved"
	// pick completed "picked"
}
