package weft_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/weftdb"
	"github.com/weftrun/weft/workflow"
)

// A decision on the order's amount sends large orders to a person, whose
// answer arrives as a signal; the converging step runs after whichever
// branch ran.
func ExampleEngine_Signal() {
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

	e.Handle("assess", func(ctx context.Context, a *weft.Attempt) (any, error) {
		var in struct{ Amount int }
		if err := a.Bind(&in); err != nil {
			return nil, err
		}
		if in.Amount > 1000 {
			return map[string]any{"branches": []string{"review"}}, nil
		}
		return map[string]any{"branches": []string{"auto"}}, nil
	})
	e.Handle("approve", func(ctx context.Context, a *weft.Attempt) (any, error) { return "approved by policy", nil })
	e.Handle("ship", func(ctx context.Context, a *weft.Attempt) (any, error) {
		for name := range a.Deps {
			return "shipped after " + name, nil
		}
		return nil, nil
	})
	wf := workflow.New("shop", "approval", "1").
		Step("assess", "assess", workflow.AsDecision()).
		Step("auto", "approve", workflow.DependsOn("assess")).
		Step("review", "", workflow.DependsOn("assess"), workflow.AwaitSignal("approval", 24*time.Hour)).
		Step("ship", "ship", workflow.AsConverge(), workflow.DependsOn("auto", "review"), workflow.When(`"auto" in deps || deps.review.payload.ok`))
	if err := e.Register(ctx, wf); err != nil {
		log.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		log.Fatal(err)
	}
	res, err := e.Submit(ctx, weft.Submission{Workflow: "shop/approval", Input: map[string]int{"amount": 5000}})
	if err != nil {
		log.Fatal(err)
	}
	// The signal may be sent before the review begins to wait: it is kept.
	if _, err := e.Signal(ctx, res.Task.ID, "approval", map[string]bool{"ok": true}); err != nil {
		log.Fatal(err)
	}
	task, err := e.Wait(ctx, res.Task.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(task.State)
	for _, s := range task.Steps {
		fmt.Println(strings.TrimSpace(fmt.Sprintf("%s %s %s", s.Name, s.State, s.Result)))
	}
	// Output:
	// completed
	// assess completed {"branches":["review"]}
	// auto skipped
	// review completed {"signal":"approval","payload":{"ok":true}}
	// ship completed "shipped after review"
}
