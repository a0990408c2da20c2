package weft_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/weftdb"
	"github.com/weftrun/weft/workflow"
)

// A step's rate limit, per customer: two sends an hour each. The third
// send of a customer is not run and uses no attempt: it waits until a
// token will exist. A namespace takes a rate at run time with SetLimits.
func ExampleEngine_SetLimits_rate() {
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
	e.Handle("mail.send", func(ctx context.Context, a *weft.Attempt) (any, error) { return "sent", nil })
	w := workflow.New("mail", "notify", "1").
		Step("send", "mail.send", workflow.WithRateLimit(2, time.Hour, "input.customer"))
	if err := e.Register(ctx, w); err != nil {
		log.Fatal(err)
	}
	var ids []int64
	for range 3 {
		res, err := e.Submit(ctx, weft.Submission{Workflow: "mail/notify", Input: map[string]string{"customer": "ada"}})
		if err != nil {
			log.Fatal(err)
		}
		ids = append(ids, res.Task.ID)
	}
	if err := e.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer e.Stop(ctx)
	for _, id := range ids[:2] {
		task, err := e.Wait(ctx, id)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("task", id, task.State)
	}
	third, err := e.Get(ctx, ids[2])
	if err != nil {
		log.Fatal(err)
	}
	send := third.Steps[0]
	fmt.Println("task", ids[2], send.State, "attempts:", send.Attempts, "for about", time.Until(*send.RunAt).Round(time.Hour/2))

	rate, err := weft.ParseRate("50/s")
	if err != nil {
		log.Fatal(err)
	}
	p, err := e.SetLimits(ctx, "mail", weft.Limits{Rate: &rate}, weft.Operator{Actor: "ops:ada", Reason: "provider quota"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(p.Target, p.Rate, *p.Tokens)
	// Output:
	// task 1 completed
	// task 2 completed
	// task 3 waiting attempts: 0 for about 30m0s
	// mail 50/s 50
}
