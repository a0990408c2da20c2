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

// Cancel ends a task: its unfinished steps are cancelled and the contexts
// of its running handlers end at once, with the cause.
func ExampleEngine_Cancel() {
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

	started, stopped := make(chan struct{}), make(chan error, 1)
	e.Handle("crawl.site", func(ctx context.Context, a *weft.Attempt) (any, error) {
		close(started)
		<-ctx.Done() // crawl until told to stop
		stopped <- context.Cause(ctx)
		return nil, ctx.Err()
	})
	e.Handle("crawl.index", func(ctx context.Context, a *weft.Attempt) (any, error) { return "indexed", nil })
	wf := workflow.New("crawl", "site", "1").
		Step("crawl", "crawl.site").
		Step("index", "crawl.index", workflow.DependsOn("crawl"))
	if err := e.Register(ctx, wf); err != nil {
		log.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		log.Fatal(err)
	}
	res, err := e.Submit(ctx, weft.Submission{Workflow: "crawl/site"})
	if err != nil {
		log.Fatal(err)
	}
	<-started
	if err := e.Cancel(ctx, res.Task.ID); err != nil {
		log.Fatal(err)
	}
	fmt.Println("handler stopped:", <-stopped)
	task, err := e.Wait(ctx, res.Task.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(task.State)
	for _, s := range task.Steps {
		fmt.Println(s.Name, s.State)
	}
	// Output:
	// handler stopped: task cancelled
	// cancelled
	// crawl cancelled
	// index cancelled
}
