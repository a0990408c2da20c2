// Command durable runs a durable function: a checkout written as plain Go
// code whose steps are recorded in the database as they finish.
//
//	go run ./examples/durable --db checkout.db
//
// It registers the function shop/checkout (reserve, charge, a durable sleep,
// ship), submits a task, or resumes the unfinished one in the database, and
// runs until that task ends. Each step prints "ran step NAME" when its code
// has run; the sleep prints "sleeping". Kill it (kill -9) while it sleeps
// and start it again: it finishes the task without running reserve or
// charge again.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/weftdb"
)

type order struct {
	ID     string `json:"id"`
	Amount int    `json:"amount"`
}

type receipt struct {
	Reservation string `json:"reservation"`
	Charge      string `json:"charge"`
	Tracking    string `json:"tracking"`
}

// checkout is the durable function: ordinary Go, whose calls through weft
// are recorded.
func checkout(pause time.Duration) func(weft.FuncContext, order) (receipt, error) {
	return func(ctx weft.FuncContext, o order) (receipt, error) {
		reservation, err := weft.Step(ctx, "reserve", func(context.Context) (string, error) {
			fmt.Println("ran step reserve")
			return "res-" + o.ID, nil
		})
		if err != nil {
			return receipt{}, err
		}
		charge, err := weft.Step(ctx, "charge", func(context.Context) (string, error) {
			fmt.Printf("ran step charge (%d cents)\n", o.Amount)
			return "ch-" + o.ID, nil
		})
		if err != nil {
			return receipt{}, err
		}
		// The output of a replay: printed each time the function passes
		// here, but the sleep itself is recorded once.
		if err := ctx.Sleep(pause); err != nil {
			return receipt{}, err
		}
		tracking, err := weft.Step(ctx, "ship", func(context.Context) (string, error) {
			fmt.Println("ran step ship")
			return "trk-" + o.ID, nil
		})
		if err != nil {
			return receipt{}, err
		}
		return receipt{Reservation: reservation, Charge: charge, Tracking: tracking}, nil
	}
}

func main() {
	db := flag.String("db", "checkout.db", "SQLite file (or postgres:// URL) that holds the task")
	pause := flag.Duration("sleep", 5*time.Second, "how long the durable sleep between charge and ship lasts")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *db, *pause); err != nil {
		fmt.Fprintln(os.Stderr, "durable:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, path string, pause time.Duration) error {
	if pause <= 0 {
		return fmt.Errorf("--sleep must be above zero, got %s", pause)
	}
	db, err := weftdb.Open(ctx, path, weftdb.Options{})
	if err != nil {
		return err
	}
	defer db.Close()
	e, err := weft.New(db, weft.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	if err := weft.RegisterFunc(ctx, e, "shop/checkout", checkout(pause)); err != nil {
		return err
	}
	id, resumed, err := unfinished(ctx, e)
	if err != nil {
		return err
	}
	if err := e.Start(ctx); err != nil {
		return err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = e.Stop(stopCtx)
	}()
	if resumed {
		fmt.Printf("resuming task %d\n", id)
	} else {
		res, err := e.Submit(ctx, weft.Submission{Workflow: "shop/checkout", Input: order{ID: "A-1001", Amount: 4200}})
		if err != nil {
			return err
		}
		id = res.Task.ID
		fmt.Printf("submitted task %d\n", id)
	}
	// "sleeping" once the sleep begins: the task's sleep step waits.
	go announceSleep(ctx, e, id)
	task, err := e.Wait(ctx, id)
	if err != nil {
		return err
	}
	if task.State != state.TaskCompleted {
		return fmt.Errorf("task %d %s: %s", id, task.State, task.Steps[0].Error)
	}
	fmt.Printf("task %d completed: %s\n", id, task.Steps[0].Result)
	return nil
}

// unfinished returns the newest checkout task in the database that has not
// ended, if any.
func unfinished(ctx context.Context, e *weft.Engine) (int64, bool, error) {
	tasks, err := e.List(ctx, weft.TaskFilter{Workflow: "shop/checkout", Limit: 20})
	if err != nil {
		return 0, false, err
	}
	for _, t := range tasks {
		if !t.State.Terminal() {
			return t.ID, true, nil
		}
	}
	return 0, false, nil
}

// announceSleep prints "sleeping" when the task's sleep begins.
func announceSleep(ctx context.Context, e *weft.Engine, id int64) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		task, err := e.Get(ctx, id)
		if err != nil && !errors.Is(err, context.Canceled) {
			return
		}
		for _, s := range task.Steps {
			if s.Name == "sleep" && s.State == state.StepWaiting && s.RunAt != nil {
				fmt.Printf("sleeping until %s\n", s.RunAt.Format(time.TimeOnly))
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
