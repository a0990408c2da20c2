package weft_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"

	"github.com/weftrun/weft"
)

// An engine on a SQLite file runs a workflow defined in Go: two steps where
// the second receives the first one's result.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "weft-example")
	defer os.RemoveAll(dir)

	e, err := weft.Open(ctx, filepath.Join(dir, "weft.db"), weft.Config{Concurrency: 4, Logger: quietLogger()})
	if err != nil {
		log.Fatal(err)
	}
	defer e.Close()

	type order struct{ Item string }
	e.Handle("shop.price", weft.Typed(func(ctx context.Context, a *weft.Attempt, in order) (map[string]int, error) {
		return map[string]int{"cents": 100 * len(in.Item)}, nil
	}))
	e.Handle("shop.invoice", func(ctx context.Context, a *weft.Attempt) (any, error) {
		var price struct{ Cents int }
		if err := a.Dep("price", &price); err != nil {
			return nil, err
		}
		return fmt.Sprintf("invoice for %d cents", price.Cents), nil
	})
	wf := weft.NewWorkflow("shop", "checkout", "1").
		Step("price", "shop.price").
		Step("invoice", "shop.invoice", weft.DependsOn("price"))
	if err := e.Register(ctx, wf); err != nil {
		log.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		log.Fatal(err)
	}
	res, err := e.Submit(ctx, weft.Submission{Workflow: "shop/checkout", Input: order{Item: "teapot"}})
	if err != nil {
		log.Fatal(err)
	}
	task, err := e.Wait(ctx, res.Task.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(task.State)
	for _, s := range task.Steps {
		fmt.Printf("%s %s %s\n", s.Name, s.State, s.Result)
	}
	// Output:
	// completed
	// price completed {"cents":600}
	// invoice completed "invoice for 600 cents"
}

// Templates are YAML; every problem is reported with the file and the line.
func ExampleParseTemplate() {
	_, err := weft.ParseTemplate("checkout.yaml", []byte(`namespace: shop
name: checkout
version: 1.0.0
steps:
  - name: charge
    handler: shop.charge
    depends_on: [validate]
    retrys: 3
`))
	for _, line := range strings.Split(err.Error(), "\n") {
		fmt.Println(line)
	}
	// Output:
	// checkout.yaml:8: step "charge": unknown key "retrys"
	// checkout.yaml:5: step "charge": depends_on: depends on unknown step "validate"
}

// A task submitted twice with the same idempotency key runs once.
func ExampleEngine_Submit() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "weft-example")
	defer os.RemoveAll(dir)
	e, err := weft.Open(ctx, filepath.Join(dir, "weft.db"), weft.Config{Logger: quietLogger()})
	if err != nil {
		log.Fatal(err)
	}
	defer e.Close()
	if err := e.Register(ctx, weft.NewWorkflow("mail", "welcome", "1").Step("send", "mail.send")); err != nil {
		log.Fatal(err)
	}
	first, _ := e.Submit(ctx, weft.Submission{Workflow: "mail/welcome", Key: "user-42"})
	again, _ := e.Submit(ctx, weft.Submission{Workflow: "mail/welcome", Key: "user-42"})
	fmt.Println(first.Duplicate, again.Duplicate, first.Task.ID == again.Task.ID)
	// Output: false true true
}

// A task submitted inside the application's own transaction exists only if
// that transaction commits, so an order and the workflow that ships it are
// written together or not at all. On PostgreSQL, SubmitTx takes a pgx.Tx the
// same way.
func ExampleEngine_SubmitSQLTx() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "weft-example")
	defer os.RemoveAll(dir)

	e, err := weft.Open(ctx, filepath.Join(dir, "weft.db"), weft.Config{Logger: quietLogger()})
	if err != nil {
		log.Fatal(err)
	}
	defer e.Close()
	e.Handle("shop.ship", func(ctx context.Context, a *weft.Attempt) (any, error) { return "shipped", nil })
	if err := e.Register(ctx, weft.NewWorkflow("shop", "ship", "1").Step("ship", "shop.ship")); err != nil {
		log.Fatal(err)
	}

	db := e.Store().(interface{ DB() *sql.DB }).DB()
	if _, err := db.ExecContext(ctx, `CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT)`); err != nil {
		log.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders (item) VALUES ('teapot')`); err != nil {
		log.Fatal(err)
	}
	res, err := e.SubmitSQLTx(ctx, tx, weft.Submission{Workflow: "shop/ship"})
	if err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}

	if err := e.Start(ctx); err != nil {
		log.Fatal(err)
	}
	task, err := e.Wait(ctx, res[0].Task.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(task.State, string(task.Steps[0].Result))
	// Output:
	// completed "shipped"
}
