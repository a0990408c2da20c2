package weft_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/weftdb"
	"github.com/weftrun/weft/workflow"
)

// Audit returns every state transition of a task and its steps, oldest
// first, with the reason it was made.
func ExampleEngine_Audit() {
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

	e.Handle("dns.update", func(ctx context.Context, a *weft.Attempt) (any, error) {
		if a.Number == 1 {
			return nil, errors.New("SERVFAIL")
		}
		return "updated", nil
	})
	policy := workflow.RetryPolicy{Backoff: "fixed", Initial: workflow.Duration(100 * time.Millisecond)}
	if err := e.Register(ctx, workflow.New("dns", "update", "1").Step("update", "dns.update", workflow.WithRetry(policy))); err != nil {
		log.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		log.Fatal(err)
	}
	res, err := e.Submit(ctx, weft.Submission{Workflow: "dns/update"})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := e.Wait(ctx, res.Task.ID); err != nil {
		log.Fatal(err)
	}
	audit, err := e.Audit(ctx, res.Task.ID)
	if err != nil {
		log.Fatal(err)
	}
	for _, a := range audit {
		what := "task"
		if a.Step != "" {
			what = "step " + a.Step
		}
		fmt.Println(strings.TrimSpace(fmt.Sprintf("%-11s %-9s -> %-9s %s", what, a.From, a.To, a.Reason)))
	}
	// Output:
	// task                  -> pending   submitted
	// step update           -> ready     submitted
	// step update ready     -> running   claimed
	// task        pending   -> running   first step claimed
	// step update running   -> waiting   retry scheduled: SERVFAIL
	// step update waiting   -> ready     run_at reached
	// step update ready     -> running   claimed
	// step update running   -> completed
	// task        running   -> completed every step finished
}

// List finds tasks by namespace, workflow and state, newest first.
func ExampleEngine_List() {
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

	e.Handle("img.check", weft.Typed(func(ctx context.Context, a *weft.Attempt, in struct{ File string }) (string, error) {
		if filepath.Ext(in.File) != ".png" {
			return "", weft.Permanent(fmt.Errorf("%s is not a PNG", in.File))
		}
		return "ok", nil
	}))
	if err := e.Register(ctx, workflow.New("img", "check", "1").Step("check", "img.check")); err != nil {
		log.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		log.Fatal(err)
	}
	for _, file := range []string{"a.png", "b.gif", "c.png", "d.bmp"} {
		res, err := e.Submit(ctx, weft.Submission{Workflow: "img/check", Input: map[string]string{"file": file}})
		if err != nil {
			log.Fatal(err)
		}
		if _, err := e.Wait(ctx, res.Task.ID); err != nil {
			log.Fatal(err)
		}
	}
	failed, err := e.List(ctx, weft.TaskFilter{Namespace: "img", State: state.TaskFailed})
	if err != nil {
		log.Fatal(err)
	}
	for _, t := range failed {
		fmt.Println(string(t.Input), t.Error)
	}
	// Output:
	// {"file":"d.bmp"} step "check" failed: permanent: d.bmp is not a PNG
	// {"file":"b.gif"} step "check" failed: permanent: b.gif is not a PNG
}
