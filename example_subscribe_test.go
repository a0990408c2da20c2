package weft_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/weftdb"
	"github.com/weftrun/weft/workflow"
)

// Subscribe sees the lifecycle of every step the engine runs: claims and
// the end of each attempt, with its outcome. The callback runs on the
// engine's goroutines: it must be quick and must not block.
func ExampleEngine_Subscribe() {
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

	var mu sync.Mutex
	var seen []string
	unsubscribe := e.Subscribe(func(ev weft.Event) {
		switch ev.Kind {
		case weft.EventClaimed:
			mu.Lock()
			seen = append(seen, fmt.Sprintf("claimed %s, attempt %d", ev.Step, ev.Attempt))
			mu.Unlock()
		case weft.EventStepEnded:
			mu.Lock()
			seen = append(seen, fmt.Sprintf("ended %s, attempt %d: %s", ev.Step, ev.Attempt, ev.Outcome))
			mu.Unlock()
		}
	})
	defer unsubscribe()

	e.Handle("feed.fetch", func(ctx context.Context, a *weft.Attempt) (any, error) {
		if a.Number == 1 {
			return nil, errors.New("timeout")
		}
		return "42 items", nil
	})
	e.Handle("feed.store", func(ctx context.Context, a *weft.Attempt) (any, error) { return nil, nil })
	policy := workflow.RetryPolicy{Backoff: "fixed", Initial: workflow.Duration(10 * time.Millisecond)}
	wf := workflow.New("feed", "sync", "1").
		Step("fetch", "feed.fetch", workflow.WithRetry(policy)).
		Step("store", "feed.store", workflow.DependsOn("fetch"))
	if err := e.Register(ctx, wf); err != nil {
		log.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		log.Fatal(err)
	}
	res, err := e.Submit(ctx, weft.Submission{Workflow: "feed/sync"})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := e.Wait(ctx, res.Task.ID); err != nil {
		log.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, s := range seen {
		fmt.Println(s)
	}
	// Output:
	// claimed fetch, attempt 1
	// ended fetch, attempt 1: retry
	// claimed fetch, attempt 2
	// ended fetch, attempt 2: completed
	// claimed store, attempt 1
	// ended store, attempt 1: completed
}
