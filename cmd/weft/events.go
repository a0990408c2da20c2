package main

import (
	"context"
	"errors"
	"time"

	"github.com/spf13/cobra"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/client"
	"github.com/weftrun/weft/internal/cliview"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/wire"
)

// errTaskEnded stops following a task's events once it ended.
var errTaskEnded = errors.New("task ended")

// localEventPoll is how often `weft events` reads a local database's
// history for new events.
const localEventPoll = 500 * time.Millisecond

func (a *app) eventsCommand() *cobra.Command {
	var (
		f       client.EventFilter
		jsonOut bool
	)
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Follow the lifecycle events of tasks and steps as they happen",
		Long: `Print every state transition of the matching tasks and steps (task.submitted,
step.claimed, step.failed, task.completed, ...) as it happens, from the
database's history or, with --server, from the server's event stream. It runs
until interrupted; with --task it stops when that task ends. --after resumes
after an event id printed before (or 'start' for the oldest event kept), so
nothing is missed between two runs. A step's claim (step.claimed, and
task.started with a task's first) comes when its run ends or at its engine's
next heartbeat, whichever is first, with the time of the claim.`,
		Example: `  weft events --namespace shop
  weft events --task 42 --after start --json`,
		Args: cobra.NoArgs,
		RunE: action(func(cmd *cobra.Command, _ []string) error {
			if f.TaskID < 0 {
				return usageErrorf("--task must be a task id, got %d", f.TaskID)
			}
			var err error
			if f.Namespace, f.Workflow, err = workflowFlag(f.Namespace, f.Workflow); err != nil {
				return err
			}
			if f.TaskID != 0 {
				// Waiting for the end of a task that does not exist would
				// wait forever.
				b, err := a.backend(cmd.Context(), readOnlyDB)
				if err != nil {
					return err
				}
				_, err = b.Get(cmd.Context(), f.TaskID)
				b.Close()
				if errors.Is(err, weft.ErrNotFound) {
					return notFound(f.TaskID)
				}
				if err != nil {
					return err
				}
			}
			print := func(ev wire.Event) error { return cliview.Event(a.stdout, ev, jsonOut) }
			err = a.followEvents(cmd.Context(), f, print)
			if errors.Is(err, errTaskEnded) || cmd.Context().Err() != nil {
				return nil
			}
			return err
		}),
	}
	fl := cmd.Flags()
	fl.StringVar(&f.Namespace, "namespace", "", "only this namespace")
	fl.StringVar(&f.Workflow, "workflow", "", "only this workflow: NAMESPACE/NAME, or NAME")
	fl.Int64Var(&f.TaskID, "task", 0, "only this task; stop when it ends")
	fl.StringVar(&f.After, "after", "", "start after this event id, or 'start' for the oldest event kept (default: from now)")
	fl.BoolVar(&jsonOut, "json", false, "print one JSON object per event")
	return cmd
}

// followEvents calls fn with each event matching f, through the server if
// one is configured, else from the local database, until ctx is done or fn
// returns an error (returned). With f.TaskID set it returns errTaskEnded
// after the task's final event.
func (a *app) followEvents(ctx context.Context, f client.EventFilter, fn func(wire.Event) error) error {
	handle := func(ev wire.Event) error {
		if err := fn(ev); err != nil {
			return err
		}
		if f.TaskID != 0 && ev.Step == "" && state.Task(ev.To).Terminal() {
			return errTaskEnded
		}
		return nil
	}
	if a.serverURL() != "" {
		c, err := a.serverClient()
		if err != nil {
			return err
		}
		return c.Follow(ctx, f, handle)
	}
	e, err := a.open(ctx, weft.Config{}, readOnlyDB)
	if err != nil {
		return err
	}
	defer a.closeEngine(e)
	q := weft.HistoryQuery{Namespace: f.Namespace, Workflow: f.Workflow, TaskID: f.TaskID, Limit: 500}
	switch f.After {
	case "":
		if q.After, err = e.HistoryEnd(ctx); err != nil {
			return err
		}
	case "start":
	default:
		q.After = f.After
	}
	tick := time.NewTicker(localEventPoll)
	defer tick.Stop()
	down := false // the database did not answer the last read
	for {
		events, err := e.History(ctx, q)
		if errors.Is(err, weft.ErrInvalid) {
			return usageErrorf("--after %q: not an event id of %s", f.After, a.dbURL())
		}
		if errors.Is(err, store.ErrUnavailable) {
			// A database restarting: follow on once it answers.
			if !down {
				a.log.Warn("events: the database is unavailable; following on once it answers", "error", err)
				down = true
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-tick.C:
			}
			continue
		}
		if err != nil {
			return err
		}
		if down {
			a.log.Info("events: the database answers again")
			down = false
		}
		for _, ev := range events {
			if err := handle(wire.EventOf(ev)); err != nil {
				return err
			}
			q.After = ev.Cursor
		}
		if len(events) == q.Limit {
			continue
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}
