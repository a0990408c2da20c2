package weft_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/store/sqlite"
	"github.com/weftrun/weft/weftdb"
	"github.com/weftrun/weft/workflow"
)

// An engine on a SQLite file runs a workflow defined in Go: two steps where
// the second receives the first one's result.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "weft-example")
	defer os.RemoveAll(dir)

	db, err := weftdb.Open(ctx, filepath.Join(dir, "weft.db"), weftdb.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	e, err := weft.New(db, weft.Config{Concurrency: 4, Logger: quietLogger()})
	if err != nil {
		log.Fatal(err)
	}
	defer e.Stop(ctx)

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
	wf := workflow.New("shop", "checkout", "1").
		Step("price", "shop.price").
		Step("invoice", "shop.invoice", workflow.DependsOn("price"))
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

// A task submitted twice with the same idempotency key runs once.
func ExampleEngine_Submit() {
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
	if err := e.Register(ctx, workflow.New("mail", "welcome", "1").Step("send", "mail.send")); err != nil {
		log.Fatal(err)
	}
	first, _ := e.Submit(ctx, weft.Submission{Workflow: "mail/welcome", Key: "user-42"})
	again, _ := e.Submit(ctx, weft.Submission{Workflow: "mail/welcome", Key: "user-42"})
	fmt.Println(first.Duplicate, again.Duplicate, first.Task.ID == again.Task.ID)
	// Output: false true true
}

// A task submitted inside the application's own transaction exists only if
// that transaction commits, so an order and the workflow that ships it are
// written together or not at all. On PostgreSQL, SubmitTx takes a *sql.Tx
// the same way, and SubmitPgxTx a pgx.Tx.
func ExampleEngine_SubmitTx() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "weft-example")
	defer os.RemoveAll(dir)

	db, err := sqlite.Open(ctx, filepath.Join(dir, "weft.db"), sqlite.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	e, err := weft.New(db, weft.Config{Logger: quietLogger()})
	if err != nil {
		log.Fatal(err)
	}
	defer e.Stop(ctx)
	e.Handle("shop.ship", func(ctx context.Context, a *weft.Attempt) (any, error) { return "shipped", nil })
	if err := e.Register(ctx, workflow.New("shop", "ship", "1").Step("ship", "shop.ship")); err != nil {
		log.Fatal(err)
	}

	app := db.DB() // the application's own handle on the same file
	if _, err := app.ExecContext(ctx, `CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT)`); err != nil {
		log.Fatal(err)
	}
	tx, err := app.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders (item) VALUES ('teapot')`); err != nil {
		log.Fatal(err)
	}
	res, err := e.SubmitTx(ctx, tx, weft.Submission{Workflow: "shop/ship"})
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
