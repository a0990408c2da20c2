// Command postgres-only embeds weft with the PostgreSQL store only: it
// imports store/postgres rather than weftdb, so it links no SQLite driver
// and builds with CGO_ENABLED=0.
//
//	CGO_ENABLED=0 go build ./examples/postgres-only
//	./postgres-only -db postgres://user@localhost/db -name Ada
//
// It registers a two-step workflow with Go handlers, submits one task, runs
// it to its end and prints the greeting.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/store/postgres"
	"github.com/weftrun/weft/workflow"
)

func main() {
	db := flag.String("db", os.Getenv("WEFT_DB"), "PostgreSQL URL (default $WEFT_DB)")
	name := flag.String("name", "world", "who to greet")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	greeting, err := run(ctx, *db, *name)
	if err != nil {
		fmt.Fprintln(os.Stderr, "postgres-only:", err)
		os.Exit(1)
	}
	fmt.Println(greeting)
}

// run greets name through a workflow on the PostgreSQL database at url.
func run(ctx context.Context, url, name string) (string, error) {
	if url == "" {
		return "", fmt.Errorf("no database: pass -db postgres://… or set WEFT_DB")
	}
	s, err := postgres.Open(ctx, url, postgres.Options{})
	if err != nil {
		return "", err
	}
	defer s.Close()
	e, err := weft.New(s, weft.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return "", err
	}
	type input struct{ Name string }
	e.Handle("hello.upper", weft.Typed(func(ctx context.Context, a *weft.Attempt, in input) (string, error) {
		if in.Name == "" {
			return "", weft.Permanent(fmt.Errorf("no name"))
		}
		return fmt.Sprintf("%s!", in.Name), nil
	}))
	e.Handle("hello.greet", func(ctx context.Context, a *weft.Attempt) (any, error) {
		var who string
		if err := a.Dep("upper", &who); err != nil {
			return nil, err
		}
		return "hello, " + who, nil
	})
	if err := e.Register(ctx, workflow.New("hello", "pg", "1").
		Step("upper", "hello.upper").
		Step("greet", "hello.greet", workflow.DependsOn("upper"))); err != nil {
		return "", err
	}
	if err := e.Start(ctx); err != nil {
		return "", err
	}
	defer e.Stop(context.WithoutCancel(ctx))
	res, err := e.Submit(ctx, weft.Submission{Workflow: "hello/pg", Input: input{Name: name}})
	if err != nil {
		return "", err
	}
	task, err := e.Wait(ctx, res.Task.ID)
	if err != nil {
		return "", err
	}
	for _, st := range task.Steps {
		if st.Name == "greet" && task.State == "completed" {
			var out string
			err := json.Unmarshal(st.Result, &out)
			return out, err
		}
	}
	return "", fmt.Errorf("task %d ended %s", task.ID, task.State)
}
