package weft_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/weftdb"
	"github.com/weftrun/weft/workflow"
)

// A workflow's schedules are registered with it; the maintenance leader
// then submits one task per tick. A schedule can be paused and resumed,
// with who did it and why in its audit.
func ExampleEngine_Schedules() {
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
	wf := workflow.New("ops", "report", "1").
		Step("build", "report.build").
		Schedule("nightly", "30 2 * * *", workflow.InTimeZone("America/New_York"),
			workflow.ScheduleInput(map[string]any{"scope": "all"}), workflow.WithCatchUp(workflow.CatchUpAll, 3))
	if err := e.Register(ctx, wf); err != nil {
		log.Fatal(err)
	}
	s, err := e.FindSchedule(ctx, "nightly")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(s.ScheduleKey, s.Cron, s.TimeZone, s.CatchUp, s.MaxCatchUp, s.Paused)
	if _, err := e.PauseSchedule(ctx, s.ScheduleKey, weft.Operator{Actor: "ops:ada", Reason: "quarter close"}); err != nil {
		log.Fatal(err)
	}
	audit, err := e.ScheduleAudit(ctx, s.ScheduleKey)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(audit[0].Action, audit[0].Actor, audit[0].Reason)
	// Output:
	// ops/report/nightly 30 2 * * * America/New_York all 3 false
	// paused ops:ada quarter close
}

// A step of type workflow starts a child task of another workflow, with an
// input built from the task's input and its dependencies, waits for it
// without holding a slot, and takes the child's result: its final steps'
// results by name.
func ExampleEngine_Register_subWorkflow() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "weft-example")
	defer os.RemoveAll(dir)
	db, err := weftdb.Open(ctx, filepath.Join(dir, "weft.db"), weftdb.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	e, err := weft.New(db, weft.Config{Logger: quietLogger(), Concurrency: 1})
	if err != nil {
		log.Fatal(err)
	}
	defer e.Stop(ctx)
	e.Handle("weigh", func(ctx context.Context, a *weft.Attempt) (any, error) { return map[string]float64{"kg": 1.5}, nil })
	e.Handle("label", func(ctx context.Context, a *weft.Attempt) (any, error) {
		var in struct {
			Order    int
			WeightKg float64 `json:"weight_kg"`
		}
		if err := a.Bind(&in); err != nil {
			return nil, err
		}
		return fmt.Sprintf("TRK-%d-%.1fkg", in.Order, in.WeightKg), nil
	})
	for _, w := range []*workflow.Workflow{
		workflow.New("shop", "label", "1").Step("label", "label"),
		workflow.New("shop", "order", "1").
			Step("weigh", "weigh").
			Step("ship", "", workflow.AsSubWorkflow("shop/label", `{"order": input.order, "weight_kg": deps.weigh.kg}`), workflow.DependsOn("weigh")),
	} {
		if err := e.Register(ctx, w); err != nil {
			log.Fatal(err)
		}
	}
	if err := e.Start(ctx); err != nil {
		log.Fatal(err)
	}
	res, err := e.Submit(ctx, weft.Submission{Workflow: "shop/order", Input: map[string]int{"order": 7}})
	if err != nil {
		log.Fatal(err)
	}
	task, err := e.Wait(ctx, res.Task.ID)
	if err != nil {
		log.Fatal(err)
	}
	child, err := e.Get(ctx, task.Children[0])
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(task.State, string(task.Steps[1].Result))
	fmt.Println(child.ParentStep, child.Depth)
	// Output:
	// completed {"label":"TRK-7-1.5kg"}
	// ship 1
}
