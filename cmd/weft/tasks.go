package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/client"
	"github.com/weftrun/weft/internal/cliview"
	"github.com/weftrun/weft/internal/taskview"
	"github.com/weftrun/weft/wire"
)

func (a *app) tasksCommand() *cobra.Command {
	var (
		ff      filterFlags
		key     string
		limit   int
		before  int64
		jsonOut bool
	)
	cmd := &cobra.Command{
		Use:   "tasks",
		Short: "List tasks, newest first",
		Long: `List tasks, newest first. The NOW column says where each unfinished task
stands: its most telling ready, running or waiting step ("charge running 2/5",
"approval waits for signal approve until 15:04"); --json gives all of them in
"active".`,
		Example: `  weft tasks --state failed
  weft tasks --workflow shop/checkout --tag env=staging --created-after 24h
  weft tasks --attention
  weft tasks --workflow shop/checkout --json | jq '.[].id'`,
		Args: cobra.NoArgs,
		RunE: action(func(cmd *cobra.Command, _ []string) error {
			f, err := ff.filter()
			if err != nil {
				return err
			}
			f.Key = key
			if len(key) > 255 {
				return usageErrorf("--key: at most 255 bytes")
			}
			f.Limit, f.BeforeID = limit, before
			if limit < 1 {
				return usageErrorf("--limit must be at least 1, got %d", limit)
			}
			if before < 0 {
				return usageErrorf("--before must be a task id, got %d", before)
			}
			return a.listTasks(cmd.Context(), f, jsonOut)
		}),
	}
	fl := cmd.Flags()
	ff.add(fl)
	fl.StringVar(&key, "key", "", "only tasks with this idempotency key")
	fl.IntVar(&limit, "limit", 100, "at most this many tasks")
	fl.Int64Var(&before, "before", 0, "only tasks with an id below this one (to page through)")
	fl.BoolVar(&jsonOut, "json", false, "print a JSON array")
	return cmd
}

func joinStates[S ~string](states []S) string {
	s := make([]string, len(states))
	for i, v := range states {
		s[i] = string(v)
	}
	return strings.Join(s, ", ")
}

func (a *app) listTasks(ctx context.Context, f weft.TaskFilter, jsonOut bool) error {
	e, err := a.backend(ctx, readOnlyDB)
	if err != nil {
		return err
	}
	defer e.Close()
	// Where each unfinished task stands, for the NOW column and the
	// JSON's "active"; a server from before active=true refuses it, and
	// the list goes without.
	f.Active = !f.Attention
	tasks, err := e.List(ctx, f)
	if ae, ok := errors.AsType[*client.Error](err); ok && ae.Code == wire.CodeUnknownField && ae.Field == "active" {
		f.Active = false
		tasks, err = e.List(ctx, f)
	}
	if err != nil {
		return fmt.Errorf("list tasks: %w", err)
	}
	return writeList(a, tasks, jsonOut, "no tasks", func(w io.Writer, tasks []wire.Task) error {
		if f.Attention {
			return cliview.Attention(w, tasks)
		}
		return cliview.Tasks(w, tasks, time.Now())
	})
}

func (a *app) taskCommand() *cobra.Command {
	var jsonOut, audit bool
	cmd := &cobra.Command{
		Use:   "task ID",
		Short: "Show a task and its steps",
		Args:  cobra.ExactArgs(1),
		RunE: action(func(cmd *cobra.Command, args []string) error {
			id, err := parseID(args[0])
			if err != nil {
				return err
			}
			return a.showTask(cmd.Context(), id, jsonOut, audit)
		}),
	}
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print the task as JSON (with --audit, its \"audit\" field holds the trail)")
	cmd.Flags().BoolVar(&audit, "audit", false, "add the audit trail: every state transition of the task and its steps")
	return cmd
}

// taskWithAudit is the JSON of `weft task --json --audit`: the task object
// with an "audit" field.
type taskWithAudit struct {
	*wire.Task
	Audit []wire.AuditEntry `json:"audit"`
}

func (a *app) showTask(ctx context.Context, id int64, jsonOut, audit bool) error {
	e, err := a.backend(ctx, readOnlyDB)
	if err != nil {
		return err
	}
	defer e.Close()
	t, err := e.Get(ctx, id)
	if errors.Is(err, weft.ErrNotFound) {
		return notFound(id)
	}
	if err != nil {
		return fmt.Errorf("get task %d: %w", id, err)
	}
	var trail []wire.AuditEntry
	if audit {
		if trail, err = e.Audit(ctx, id); err != nil {
			return fmt.Errorf("audit of task %d: %w", id, err)
		}
		if trail == nil {
			trail = []wire.AuditEntry{}
		}
	}
	if jsonOut {
		if audit {
			return writeJSON(a.stdout, taskWithAudit{Task: t, Audit: trail})
		}
		return writeJSON(a.stdout, t)
	}
	if err := cliview.Task(a.stdout, t, time.Now()); err != nil {
		return err
	}
	if audit {
		return cliview.Audit(a.stdout, trail)
	}
	return nil
}

func (a *app) signalCommand() *cobra.Command {
	var payload string
	cmd := &cobra.Command{
		Use:   "signal ID NAME",
		Short: "Send a named signal, with an optional JSON payload, to a task",
		Long: `Send a signal to a task. The task's first step waiting for a signal of that
name completes with {"signal": NAME, "payload": PAYLOAD} as its result, and
the steps after it run. If no step waits for it yet, the signal is kept and
completes the next step that begins to wait for it.`,
		Args: cobra.ExactArgs(2),
		// A name the engine or the server refuses is said as NAME.
		Annotations: map[string]string{argField + "name": "signal name"},
		RunE: action(func(cmd *cobra.Command, args []string) error {
			id, err := parseID(args[0])
			if err != nil {
				return err
			}
			var body json.RawMessage
			if cmd.Flags().Changed("payload") {
				if !json.Valid([]byte(payload)) {
					return usageErrorf("--payload: not valid JSON: %s", taskview.Abbrev(payload, 80))
				}
				body = json.RawMessage(payload)
			}
			ctx := cmd.Context()
			e, err := a.backend(ctx, existingDB)
			if err != nil {
				return err
			}
			defer e.Close()
			delivered, err := e.Signal(ctx, id, args[1], body)
			switch {
			case errors.Is(err, weft.ErrNotFound):
				return notFound(id)
			case errors.Is(err, weft.ErrConflict):
				return conflictMessage(err)
			case err != nil:
				return err
			case delivered:
				fmt.Fprintf(a.stdout, "signal %s delivered to task %d\n", args[1], id)
			default:
				fmt.Fprintf(a.stdout, "signal %s kept for task %d: no step waits for it yet\n", args[1], id)
			}
			return nil
		}),
	}
	cmd.Flags().StringVar(&payload, "payload", "", "the signal's payload, as JSON (default null)")
	return cmd
}

func (a *app) cancelCommand() *cobra.Command {
	var (
		reason string
		bf     bulkFlags
	)
	cmd := &cobra.Command{
		Use:   "cancel ID | cancel FILTER...",
		Short: "Cancel a task, or the tasks a filter selects: unfinished steps are cancelled, running handlers stopped",
		Long: `Cancel a task, or every pending and running task a filter selects (in batches
of 500 tasks, one transaction each: an interrupted run is continued by running
it again). The audit trail of each task records who cancelled it (cli:<OS
user>, or api:<key name> through --server) and --reason.`,
		Example: `  weft cancel 42 --reason "customer withdrew the order"
  weft cancel --workflow shop/checkout --state pending --tag env=staging --dry-run
  weft cancel --workflow shop/checkout --state pending --tag env=staging --reason "staging reset"`,
		Args: cobra.MaximumNArgs(1),
		RunE: action(func(cmd *cobra.Command, args []string) error {
			return a.bulkOrOne(cmd, args, &bf, reason, bulkCancel, backend.Cancel, "task %d cancelled")
		}),
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded in the task's audit trail")
	bf.add(cmd.Flags())
	return cmd
}

func (a *app) retryCommand() *cobra.Command {
	var (
		reason string
		bf     bulkFlags
	)
	cmd := &cobra.Command{
		Use:   "retry ID | retry FILTER...",
		Short: "Retry a failed task from its failed steps",
		Long: `Retry a failed task: its failed and expired steps become ready with fresh
attempts, and the steps skipped because of them wait for them again. A running
'weft worker' (or the next one started) runs them. The audit trail records who
retried it (cli:<OS user>, or api:<key name> through --server) and --reason.

Given a filter instead of an ID, it retries every failed task the filter
selects, in batches.`,
		Example: `  weft retry 42 --reason "the payment provider is back"
  weft retry --workflow shop/checkout --created-after 2h --reason "the payment provider is back"
  weft retry --attention --dry-run`,
		Args: cobra.MaximumNArgs(1),
		RunE: action(func(cmd *cobra.Command, args []string) error {
			return a.bulkOrOne(cmd, args, &bf, reason, bulkRetry, backend.Retry, "task %d retried: its failed steps are queued to run again")
		}),
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded in the task's audit trail")
	bf.add(cmd.Flags())
	return cmd
}

// change applies cancel or retry to a task and prints the confirmation.
func (a *app) change(ctx context.Context, arg, reason string, do func(backend, context.Context, int64, string) error, confirm string) error {
	id, err := parseID(arg)
	if err != nil {
		return err
	}
	e, err := a.backend(ctx, existingDB)
	if err != nil {
		return err
	}
	defer e.Close()
	err = do(e, ctx, id, reason)
	switch {
	case errors.Is(err, weft.ErrNotFound):
		return notFound(id)
	case errors.Is(err, weft.ErrConflict):
		return conflictMessage(err)
	case err != nil:
		return err
	}
	fmt.Fprintf(a.stdout, confirm+"\n", id)
	return nil
}

// conflictMessage returns the reason of a conflict ("task 7 is completed
// and cannot be cancelled"), local or from a server.
func conflictMessage(err error) error {
	if ce, ok := errors.AsType[*weft.ConflictError](err); ok {
		return errors.New(ce.Reason)
	}
	return err
}
