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

// Tasks carry tags; lists and bulk actions select tasks by them. A bulk
// action works in batches and records the actor and reason for each task.
func ExampleEngine_CancelTasks() {
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
	if err := e.Register(ctx, workflow.New("shop", "checkout", "1").Step("charge", "shop.charge")); err != nil {
		log.Fatal(err)
	}
	for _, env := range []string{"staging", "staging", "prod"} {
		if _, err := e.Submit(ctx, weft.Submission{Workflow: "shop/checkout", Tags: map[string]string{"env": env}}); err != nil {
			log.Fatal(err)
		}
	}
	staging := weft.TaskFilter{Namespace: "shop", Workflow: "checkout", Tags: map[string]string{"env": "staging"}}
	dry, err := e.CancelTasks(ctx, weft.BulkRequest{Filter: staging, DryRun: true})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("would cancel:", dry.Matched)
	res, err := e.CancelTasks(ctx, weft.BulkRequest{Filter: staging, Actor: "ops:ada", Reason: "staging reset"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("cancelled:", res.Done)
	deleted, err := e.DeleteTasks(ctx, weft.BulkRequest{Filter: weft.TaskFilter{State: "cancelled"}, Actor: "ops:ada"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("deleted:", deleted.Done)
	left, err := e.List(ctx, weft.TaskFilter{Tags: map[string]string{"env": "prod"}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("left:", len(left), left[0].State, left[0].Tags["env"])
	// Output:
	// would cancel: 2
	// cancelled: 2
	// deleted: 2
	// left: 1 pending prod
}
