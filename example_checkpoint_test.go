package weft_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/weftdb"
	"github.com/weftrun/weft/workflow"
)

// A handler that saves checkpoints resumes where the last attempt got to
// after a failure (or a crash of its engine) instead of starting over.
func ExampleAttempt_SaveCheckpoint() {
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

	type cursor struct {
		Row int `json:"row"`
		Sum int `json:"sum"`
	}
	e.Handle("csv.import", func(ctx context.Context, a *weft.Attempt) (any, error) {
		var c cursor
		if a.Checkpoint != nil {
			if err := json.Unmarshal(a.Checkpoint, &c); err != nil {
				return nil, weft.Permanent(err)
			}
		}
		fmt.Printf("attempt %d starts after row %d\n", a.Number, c.Row)
		for c.Row < 6 {
			if a.Number == 1 && c.Row == 4 {
				return nil, errors.New("connection lost")
			}
			c.Row++
			c.Sum += c.Row
			if err := a.SaveCheckpoint(ctx, c); err != nil {
				return nil, err
			}
		}
		return c, nil
	})
	policy := workflow.RetryPolicy{Backoff: "fixed", Initial: workflow.Duration(10 * time.Millisecond)}
	if err := e.Register(ctx, workflow.New("csv", "import", "1").Step("import", "csv.import", workflow.WithRetry(policy))); err != nil {
		log.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		log.Fatal(err)
	}
	res, err := e.Submit(ctx, weft.Submission{Workflow: "csv/import"})
	if err != nil {
		log.Fatal(err)
	}
	task, err := e.Wait(ctx, res.Task.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(task.State, string(task.Steps[0].Result))
	// Output:
	// attempt 1 starts after row 0
	// attempt 2 starts after row 4
	// completed {"row":6,"sum":21}
}

// Progress records how far a handler got, shown by "weft task" and the
// dashboard while it runs and kept with the step.
func ExampleAttempt_Progress() {
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

	e.Handle("video.encode", func(ctx context.Context, a *weft.Attempt) (any, error) {
		for done := 1; done <= 4; done++ {
			// ... encode a quarter of the video ...
			if err := a.Progress(ctx, float64(done)/4, fmt.Sprintf("%d of 4 parts", done)); err != nil {
				return nil, err
			}
		}
		return "video.mp4", nil
	})
	if err := e.Register(ctx, workflow.New("video", "encode", "1").Step("encode", "video.encode")); err != nil {
		log.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		log.Fatal(err)
	}
	res, err := e.Submit(ctx, weft.Submission{Workflow: "video/encode"})
	if err != nil {
		log.Fatal(err)
	}
	task, err := e.Wait(ctx, res.Task.ID)
	if err != nil {
		log.Fatal(err)
	}
	s := task.Steps[0]
	fmt.Printf("%s %.0f%% %s\n", s.State, *s.Progress*100, s.ProgressMessage)
	// Output:
	// completed 100% 4 of 4 parts
}
