package weft_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/weftdb"
	"github.com/weftrun/weft/workflow"
)

// Snooze ends an attempt without failing it: the step waits durably,
// holding no slot, and runs again with the same attempt number, so waiting
// for something slow does not use up its retries.
func ExampleSnooze() {
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

	var polls atomic.Int32 // the report is ready at the third look
	e.Handle("report.fetch", func(ctx context.Context, a *weft.Attempt) (any, error) {
		if polls.Add(1) < 3 {
			fmt.Printf("attempt %d: not ready, snooze\n", a.Number)
			return nil, weft.Snooze(20 * time.Millisecond)
		}
		fmt.Printf("attempt %d: ready\n", a.Number)
		return "report.pdf", nil
	})
	wf := workflow.New("report", "fetch", "1").
		Step("fetch", "report.fetch", workflow.WithRetry(workflow.RetryPolicy{MaxAttempts: 1}))
	if err := e.Register(ctx, wf); err != nil {
		log.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		log.Fatal(err)
	}
	res, err := e.Submit(ctx, weft.Submission{Workflow: "report/fetch"})
	if err != nil {
		log.Fatal(err)
	}
	task, err := e.Wait(ctx, res.Task.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(task.State, task.Steps[0].Attempts, string(task.Steps[0].Result))
	// Output:
	// attempt 1: not ready, snooze
	// attempt 1: not ready, snooze
	// attempt 1: ready
	// completed 1 "report.pdf"
}
