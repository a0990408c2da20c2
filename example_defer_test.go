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

// DeferUntil waits for a condition with the handler's slot released, so
// other steps run meanwhile: on this engine of a single slot, the step
// that restocks runs while the step that ships waits for the stock.
func ExampleAttempt_DeferUntil() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "weft-example")
	defer os.RemoveAll(dir)
	db, err := weftdb.Open(ctx, filepath.Join(dir, "weft.db"), weftdb.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	e, err := weft.New(db, weft.Config{Concurrency: 1, Logger: quietLogger()})
	if err != nil {
		log.Fatal(err)
	}
	defer e.Stop(ctx)

	var stock atomic.Int32
	e.Handle("shop.ship", func(ctx context.Context, a *weft.Attempt) (any, error) {
		inStock := func(context.Context) (bool, error) { return stock.Load() > 0, nil }
		if err := a.DeferUntil(ctx, inStock, 10*time.Millisecond); err != nil {
			return nil, err
		}
		return fmt.Sprintf("shipped 1 of %d", stock.Load()), nil
	})
	e.Handle("shop.restock", func(ctx context.Context, a *weft.Attempt) (any, error) {
		stock.Store(12)
		return "restocked 12", nil
	})
	wf := workflow.New("shop", "warehouse", "1").
		Step("ship", "shop.ship").
		Step("restock", "shop.restock")
	if err := e.Register(ctx, wf); err != nil {
		log.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		log.Fatal(err)
	}
	res, err := e.Submit(ctx, weft.Submission{Workflow: "shop/warehouse"})
	if err != nil {
		log.Fatal(err)
	}
	task, err := e.Wait(ctx, res.Task.ID)
	if err != nil {
		log.Fatal(err)
	}
	for _, s := range task.Steps {
		fmt.Println(s.Name, s.State, string(s.Result))
	}
	// Output:
	// ship completed "shipped 1 of 12"
	// restock completed "restocked 12"
}
