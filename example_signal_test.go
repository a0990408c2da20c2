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

// A signal step that waits past its timeout fails; a step with the
// trigger rule one_failed runs then, to escalate. The task still fails,
// since one of its steps did.
func ExampleEngine_Signal_timeout() {
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

	e.Handle("ops.page", func(ctx context.Context, a *weft.Attempt) (any, error) { return "paged the on-call", nil })
	e.Handle("shop.ship", func(ctx context.Context, a *weft.Attempt) (any, error) { return "shipped", nil })
	wf := workflow.New("shop", "approval", "1").
		Step("approve", "", workflow.AwaitSignal("approval", 50*time.Millisecond)).
		Step("ship", "shop.ship", workflow.DependsOn("approve")).
		Step("escalate", "ops.page", workflow.DependsOn("approve"), workflow.WithTriggerRule(workflow.OneFailed))
	if err := e.Register(ctx, wf); err != nil {
		log.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		log.Fatal(err)
	}
	res, err := e.Submit(ctx, weft.Submission{Workflow: "shop/approval"})
	if err != nil {
		log.Fatal(err)
	}
	// Nobody sends the "approval" signal.
	task, err := e.Wait(ctx, res.Task.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(task.State)
	for _, s := range task.Steps {
		fmt.Println(strings.TrimSpace(fmt.Sprintf("%s %s %s %s", s.Name, s.State, s.Result, s.Error)))
	}
	// Output:
	// failed
	// approve failed  timed out waiting for signal "approval"
	// ship skipped
	// escalate completed "paged the on-call"
}
