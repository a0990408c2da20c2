package weft_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/weftdb"
	"github.com/weftrun/weft/workflow"
)

// A batch step fans out over data: its handler returns a list, one item
// step per entry runs the named template (in parallel, each retried on its
// own), and the steps after the batch get the items' results in order.
func Example_batch() {
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

	e.Handle("img.list", func(ctx context.Context, a *weft.Attempt) (any, error) {
		return map[string]any{"batches": []string{"cat.png", "dog.png", "owl.png"}}, nil
	})
	e.Handle("img.resize", func(ctx context.Context, a *weft.Attempt) (any, error) {
		var file string
		if err := json.Unmarshal(a.Batch, &file); err != nil {
			return nil, weft.Permanent(err)
		}
		return "thumb-" + file, nil
	})
	e.Handle("img.publish", func(ctx context.Context, a *weft.Attempt) (any, error) {
		var thumbs []string
		if err := a.Dep("resize", &thumbs); err != nil {
			return nil, err
		}
		return fmt.Sprintf("published %d thumbnails", len(thumbs)), nil
	})
	wf := workflow.New("img", "thumbnails", "1").
		Template("thumbnail", "img.resize").
		Step("resize", "img.list", workflow.AsBatch("thumbnail")).
		Step("publish", "img.publish", workflow.DependsOn("resize"))
	if err := e.Register(ctx, wf); err != nil {
		log.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		log.Fatal(err)
	}
	res, err := e.Submit(ctx, weft.Submission{Workflow: "img/thumbnails"})
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
	// resize completed {"batches":["cat.png","dog.png","owl.png"]}
	// publish completed "published 3 thumbnails"
	// resize[0] completed "thumb-cat.png"
	// resize[1] completed "thumb-dog.png"
	// resize[2] completed "thumb-owl.png"
}
