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

// SubmitMany submits tasks in one transaction: all of them, or none if one
// is refused.
func ExampleEngine_SubmitMany() {
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

	e.Handle("mail.send", weft.Typed(func(ctx context.Context, a *weft.Attempt, in struct{ To string }) (string, error) {
		return "sent to " + in.To, nil
	}))
	if err := e.Register(ctx, workflow.New("mail", "welcome", "1").Step("send", "mail.send")); err != nil {
		log.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		log.Fatal(err)
	}
	var subs []weft.Submission
	for _, to := range []string{"ada@example.com", "bob@example.com", "cy@example.com"} {
		subs = append(subs, weft.Submission{Workflow: "mail/welcome", Input: map[string]string{"to": to}})
	}
	res, err := e.SubmitMany(ctx, subs)
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range res {
		task, err := e.Wait(ctx, r.Task.ID)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(task.State, string(task.Steps[0].Result))
	}

	// One bad submission refuses the whole call.
	_, err = e.SubmitMany(ctx, []weft.Submission{subs[0], {Workflow: "mail/goodbye"}})
	fmt.Println(err)
	// Output:
	// completed "sent to ada@example.com"
	// completed "sent to bob@example.com"
	// completed "sent to cy@example.com"
	// submission 2: submit mail/goodbye: workflow mail/goodbye@any version: not found
}

// With the identity strategy "strict", a task's idempotency key is derived
// from its workflow and its input, compared as canonical JSON: the same
// input, however its keys are ordered, never runs twice.
func ExampleEngine_Submit_identityStrict() {
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

	wf := workflow.New("billing", "invoice", "1").WithIdentity(workflow.IdentityStrict).Step("bill", "billing.bill")
	if err := e.Register(ctx, wf); err != nil {
		log.Fatal(err)
	}
	for _, input := range []string{
		`{"customer": 42, "month": "2025-01"}`,
		`{"month": "2025-01", "customer": 42}`, // the same input
		`{"customer": 42, "month": "2025-02"}`,
	} {
		res, err := e.Submit(ctx, weft.Submission{Workflow: "billing/invoice", Input: json.RawMessage(input)})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("task %d, duplicate: %t\n", res.Task.ID, res.Duplicate)
	}
	// Output:
	// task 1, duplicate: false
	// task 1, duplicate: true
	// task 2, duplicate: false
}

// RunTask runs one task to its end on an engine of its own and stops it:
// what "weft run" does. Other work in the database is left alone.
func ExampleEngine_RunTask() {
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

	e.Handle("greet", weft.Typed(func(ctx context.Context, a *weft.Attempt, in struct{ Name string }) (string, error) {
		return "hello " + in.Name, nil
	}))
	if err := e.Register(ctx, workflow.New("demo", "hello", "1").Step("greet", "greet")); err != nil {
		log.Fatal(err)
	}
	first, err := e.Submit(ctx, weft.Submission{Workflow: "demo/hello", Input: map[string]string{"name": "Ada"}})
	if err != nil {
		log.Fatal(err)
	}
	second, err := e.Submit(ctx, weft.Submission{Workflow: "demo/hello", Input: map[string]string{"name": "Bob"}})
	if err != nil {
		log.Fatal(err)
	}
	task, err := e.RunTask(ctx, second.Task.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(task.State, string(task.Steps[0].Result), e.Running())
	other, err := e.Get(ctx, first.Task.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(other.State)
	// Output:
	// completed "hello Bob" false
	// pending
}
