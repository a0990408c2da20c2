package weft_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/weftdb"
	"github.com/weftrun/weft/workflow"
)

// A decision step names which of its direct children run; the others are
// skipped. A converge step after the branches runs once the chosen ones
// have finished, and sees only their results.
func Example_decision() {
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

	e.Handle("notify.choose", func(ctx context.Context, a *weft.Attempt) (any, error) {
		var in struct{ Channels []string }
		if err := a.Bind(&in); err != nil {
			return nil, err
		}
		return map[string]any{"branches": in.Channels}, nil
	})
	e.Handle("notify.send", func(ctx context.Context, a *weft.Attempt) (any, error) { return "sent by " + a.Step, nil })
	e.Handle("notify.report", func(ctx context.Context, a *weft.Attempt) (any, error) {
		var sent []string
		for name := range a.Deps {
			sent = append(sent, name)
		}
		slices.Sort(sent)
		return strings.Join(sent, " and "), nil
	})
	wf := workflow.New("notify", "user", "1").
		Step("choose", "notify.choose", workflow.AsDecision()).
		Step("email", "notify.send", workflow.DependsOn("choose")).
		Step("sms", "notify.send", workflow.DependsOn("choose")).
		Step("push", "notify.send", workflow.DependsOn("choose")).
		Step("report", "notify.report", workflow.AsConverge(), workflow.DependsOn("email", "sms", "push"))
	if err := e.Register(ctx, wf); err != nil {
		log.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		log.Fatal(err)
	}
	res, err := e.Submit(ctx, weft.Submission{Workflow: "notify/user", Input: map[string]any{"channels": []string{"email", "push"}}})
	if err != nil {
		log.Fatal(err)
	}
	task, err := e.Wait(ctx, res.Task.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(task.State)
	for _, s := range task.Steps {
		fmt.Println(strings.TrimSpace(fmt.Sprintf("%s %s %s", s.Name, s.State, s.Result)))
	}
	// Output:
	// completed
	// choose completed {"branches":["email","push"]}
	// email completed "sent by email"
	// sms skipped
	// push completed "sent by push"
	// report completed "email and push"
}

// A when condition, over the task input and the dependencies' results,
// skips its step when it is false. Conditions are CEL expressions; see
// docs/workflows.md.
func Example_when() {
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

	e.Handle("shop.score", func(ctx context.Context, a *weft.Attempt) (any, error) {
		var in struct{ Amount int }
		if err := a.Bind(&in); err != nil {
			return nil, err
		}
		return map[string]int{"risk": in.Amount / 100}, nil
	})
	e.Handle("shop.do", func(ctx context.Context, a *weft.Attempt) (any, error) { return a.Step + " done", nil })
	wf := workflow.New("shop", "order", "1").
		Step("score", "shop.score").
		Step("coupon", "shop.do", workflow.DependsOn("score"), workflow.When(`has(input.coupon) && input.coupon.startsWith("VIP")`)).
		Step("fraud_check", "shop.do", workflow.DependsOn("score"), workflow.When(`deps.score.risk > 5`)).
		Step("ship", "shop.do", workflow.DependsOn("score"))
	if err := e.Register(ctx, wf); err != nil {
		log.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		log.Fatal(err)
	}
	for _, input := range []map[string]any{
		{"amount": 300, "coupon": "VIP10"},
		{"amount": 900},
	} {
		res, err := e.Submit(ctx, weft.Submission{Workflow: "shop/order", Input: input})
		if err != nil {
			log.Fatal(err)
		}
		task, err := e.Wait(ctx, res.Task.ID)
		if err != nil {
			log.Fatal(err)
		}
		var ran []string
		for _, s := range task.Steps {
			if s.Name != "score" {
				ran = append(ran, fmt.Sprintf("%s %s", s.Name, s.State))
			}
		}
		fmt.Printf("%s: %s\n", task.Input, strings.Join(ran, ", "))
	}
	// Output:
	// {"amount":300,"coupon":"VIP10"}: coupon completed, fraud_check skipped, ship completed
	// {"amount":900}: coupon skipped, fraud_check completed, ship completed
}

// Trigger rules decide from how a step's dependencies ended whether it
// runs: by default (all_success) a failure skips the steps after it, while
// one_failed runs only after a failure and all_done runs whatever
// happened.
func Example_triggerRules() {
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

	e.Handle("deploy.push", func(ctx context.Context, a *weft.Attempt) (any, error) {
		return nil, weft.Permanent(errors.New("health check failed"))
	})
	e.Handle("deploy.do", func(ctx context.Context, a *weft.Attempt) (any, error) { return a.Step + " done", nil })
	wf := workflow.New("deploy", "release", "1").
		Step("push", "deploy.push").
		Step("announce", "deploy.do", workflow.DependsOn("push")).
		Step("rollback", "deploy.do", workflow.DependsOn("push"), workflow.WithTriggerRule(workflow.OneFailed)).
		Step("unlock", "deploy.do", workflow.DependsOn("push"), workflow.WithTriggerRule(workflow.AllDone))
	if err := e.Register(ctx, wf); err != nil {
		log.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		log.Fatal(err)
	}
	res, err := e.Submit(ctx, weft.Submission{Workflow: "deploy/release"})
	if err != nil {
		log.Fatal(err)
	}
	task, err := e.Wait(ctx, res.Task.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(task.State)
	for _, s := range task.Steps {
		fmt.Println(s.Name, s.State)
	}
	// Output:
	// failed
	// push failed
	// announce skipped
	// rollback completed
	// unlock completed
}
