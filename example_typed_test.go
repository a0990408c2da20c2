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

// Typed handlers take the task input as a Go value and return a Go value:
// weft decodes the input from JSON and encodes the result to JSON, which
// the next step decodes with Attempt.Dep.
func ExampleTyped() {
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

	type Order struct {
		Item     string `json:"item"`
		Quantity int    `json:"quantity"`
	}
	type Quote struct {
		Item  string `json:"item"`
		Cents int    `json:"cents"`
	}
	e.Handle("shop.quote", weft.Typed(func(ctx context.Context, a *weft.Attempt, o Order) (Quote, error) {
		return Quote{Item: o.Item, Cents: 250 * o.Quantity}, nil
	}))
	e.Handle("shop.confirm", weft.Typed(func(ctx context.Context, a *weft.Attempt, o Order) (string, error) {
		var q Quote
		if err := a.Dep("quote", &q); err != nil {
			return "", err
		}
		return fmt.Sprintf("%d x %s for %d cents", o.Quantity, q.Item, q.Cents), nil
	}))
	wf := workflow.New("shop", "order", "1").
		Step("quote", "shop.quote").
		Step("confirm", "shop.confirm", workflow.DependsOn("quote"))
	if err := e.Register(ctx, wf); err != nil {
		log.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		log.Fatal(err)
	}
	res, err := e.Submit(ctx, weft.Submission{Workflow: "shop/order", Input: Order{Item: "mug", Quantity: 3}})
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
	// quote completed {"item":"mug","cents":750}
	// confirm completed "3 x mug for 750 cents"
}
