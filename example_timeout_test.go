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

// A step's timeout bounds each attempt: the handler's context ends at
// Attempt.Deadline, and an attempt that runs past it fails and is retried
// under the step's policy (here there is one attempt only).
func Example_timeout() {
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

	e.Handle("report.render", func(ctx context.Context, a *weft.Attempt) (any, error) {
		fmt.Println("has a deadline:", !a.Deadline.IsZero())
		select {
		case <-time.After(time.Minute): // rendering takes too long
			return "report.pdf", nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	wf := workflow.New("report", "render", "1").Step("render", "report.render",
		workflow.WithTimeout(50*time.Millisecond), workflow.WithRetry(workflow.RetryPolicy{MaxAttempts: 1}))
	if err := e.Register(ctx, wf); err != nil {
		log.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		log.Fatal(err)
	}
	res, err := e.Submit(ctx, weft.Submission{Workflow: "report/render"})
	if err != nil {
		log.Fatal(err)
	}
	task, err := e.Wait(ctx, res.Task.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(task.State, task.Steps[0].Error)
	// Output:
	// has a deadline: true
	// failed step timed out after 50ms (context deadline exceeded) (attempt 1 of 1)
}

// A task submitted with GoodUntil expires, without running, if no engine
// starts it in time: here the engine starts too late.
func ExampleSubmission_goodUntil() {
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

	e.Handle("promo.send", func(ctx context.Context, a *weft.Attempt) (any, error) { return "sent", nil })
	if err := e.Register(ctx, workflow.New("promo", "flash-sale", "1").Step("send", "promo.send")); err != nil {
		log.Fatal(err)
	}
	res, err := e.Submit(ctx, weft.Submission{Workflow: "promo/flash-sale", GoodUntil: time.Now().Add(20 * time.Millisecond)})
	if err != nil {
		log.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if err := e.Start(ctx); err != nil {
		log.Fatal(err)
	}
	task, err := e.Wait(ctx, res.Task.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(task.State, task.Steps[0].Name, task.Steps[0].State, task.Steps[0].Attempts)
	// Output:
	// expired send expired 0
}
