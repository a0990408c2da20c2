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

// A namespace's weight shares the slots between namespaces that have ready
// work: at weight 3, shop gets three slots for each one of a namespace at
// the default weight of 1. Weights, like limits, are held in the database
// for every engine and audited.
func ExampleEngine_SetLimits() {
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
	// A namespace exists once a workflow is registered in it.
	if err := e.Register(ctx, workflow.New("shop", "checkout", "1").Step("charge", "shop.charge")); err != nil {
		log.Fatal(err)
	}
	weight, limit := 3, 8
	p, err := e.SetLimits(ctx, "shop", weft.Limits{Weight: &weight, Concurrency: &limit}, weft.Operator{Actor: "ops:ada", Reason: "checkout first"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(p.Target, "weight", p.Weight, "concurrency", p.Concurrency)
	changes, err := e.PolicyChanges(ctx, 1)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(changes[0].Actor, changes[0].Change)
	// Output:
	// shop weight 3 concurrency 8
	// ops:ada concurrency=8 weight=3
}
