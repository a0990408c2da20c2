package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/workflow"
)

// timeLayout is how tables print times, in the local zone.
const timeLayout = "2006-01-02 15:04:05"

func (a *app) tasksCommand() *cobra.Command {
	var (
		st, namespace, wf, key string
		limit                  int
		before                 int64
		jsonOut                bool
	)
	cmd := &cobra.Command{
		Use:   "tasks",
		Short: "List tasks, newest first",
		Example: `  weft tasks --state failed
  weft tasks --workflow shop/checkout --json | jq '.[].id'`,
		Args: cobra.NoArgs,
		RunE: action(func(cmd *cobra.Command, _ []string) error {
			f := weft.TaskFilter{Namespace: namespace, State: state.Task(st), Key: key, Limit: limit, BeforeID: before}
			if st != "" && !f.State.Valid() {
				return usageErrorf("--state %q: not a task state (want one of %s)", st, joinStates(state.Tasks))
			}
			if limit < 1 {
				return usageErrorf("--limit must be at least 1, got %d", limit)
			}
			if before < 0 {
				return usageErrorf("--before must be a task id, got %d", before)
			}
			if wf != "" {
				if !strings.Contains(wf, "/") {
					f.Workflow = wf
				} else {
					ns, name, version, err := workflow.ParseRef(wf)
					if err != nil {
						return usageErrorf("--workflow %q: want NAME or NAMESPACE/NAME", wf)
					}
					if version != "" {
						return usageErrorf("--workflow %q: tasks cannot be filtered by version; use NAMESPACE/NAME", wf)
					}
					if namespace != "" && namespace != ns {
						return usageErrorf("--workflow %q is not in --namespace %q", wf, namespace)
					}
					f.Namespace, f.Workflow = ns, name
				}
			}
			return a.listTasks(cmd.Context(), f, jsonOut)
		}),
	}
	fl := cmd.Flags()
	fl.StringVar(&st, "state", "", "only tasks in this state: "+joinStates(state.Tasks))
	fl.StringVar(&namespace, "namespace", "", "only tasks of this namespace")
	fl.StringVar(&key, "key", "", "only tasks with this idempotency key")
	fl.StringVar(&wf, "workflow", "", "only tasks of this workflow: NAME or NAMESPACE/NAME")
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
	tasks, err := e.List(ctx, f)
	if err != nil {
		return fmt.Errorf("list tasks: %w", err)
	}
	if jsonOut {
		if tasks == nil {
			tasks = []weft.Task{}
		}
		return writeJSON(a.stdout, tasks)
	}
	if len(tasks) == 0 {
		fmt.Fprintln(a.stderr, "no tasks")
		return nil
	}
	tw := newTable(a.stdout)
	fmt.Fprintln(tw, "ID\tWORKFLOW\tSTATE\tCREATED\tFINISHED\tERROR")
	for i := range tasks {
		t := &tasks[i]
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", t.ID, taskRef(t), t.State, fmtTime(&t.CreatedAt), fmtTime(t.FinishedAt), abbrev(t.Error, 60))
	}
	return flushTable(tw)
}

func newTable(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 8, 2, ' ', 0) }

func flushTable(tw *tabwriter.Writer) error {
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	return nil
}

func fmtTime(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return t.Local().Format(timeLayout)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
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
	*weft.Task
	Audit []weft.AuditEntry `json:"audit"`
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
	var trail []weft.AuditEntry
	if audit {
		if trail, err = e.Audit(ctx, id); err != nil {
			return fmt.Errorf("audit of task %d: %w", id, err)
		}
		if trail == nil {
			trail = []weft.AuditEntry{}
		}
	}
	if jsonOut {
		if audit {
			return writeJSON(a.stdout, taskWithAudit{Task: t, Audit: trail})
		}
		return writeJSON(a.stdout, t)
	}
	if err := writeTask(a.stdout, t, time.Now()); err != nil {
		return err
	}
	if audit {
		return writeAudit(a.stdout, trail)
	}
	return nil
}

// writeTask prints a task's fields and a table of its steps.
func writeTask(w io.Writer, t *store.Task, now time.Time) error {
	tw := newTable(w)
	fmt.Fprintf(tw, "Task:\t%d\n", t.ID)
	fmt.Fprintf(tw, "Workflow:\t%s\n", taskRef(t))
	fmt.Fprintf(tw, "State:\t%s\n", t.State)
	fmt.Fprintf(tw, "Created:\t%s\n", fmtTime(&t.CreatedAt))
	fmt.Fprintf(tw, "Started:\t%s\n", fmtTime(t.StartedAt))
	finished := fmtTime(t.FinishedAt)
	if t.FinishedAt != nil {
		finished += " (" + fmtDuration(taskElapsed(t, now)) + ")"
	}
	fmt.Fprintf(tw, "Finished:\t%s\n", finished)
	if t.IdempotencyKey != "" {
		fmt.Fprintf(tw, "Key:\t%s\n", t.IdempotencyKey)
	}
	if t.Priority != 0 {
		fmt.Fprintf(tw, "Priority:\t%d\n", t.Priority)
	}
	fmt.Fprintf(tw, "Input:\t%s\n", abbrev(string(t.Input), 100))
	if t.Error != "" {
		fmt.Fprintf(tw, "Error:\t%s\n", abbrev(t.Error, 200))
	}
	if err := flushTable(tw); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = newTable(w)
	fmt.Fprintln(tw, "ID\tSTEP\tSTATE\tATTEMPTS\tERROR\tRESULT")
	for i := range t.Steps {
		s := &t.Steps[i]
		attempts := fmt.Sprintf("%d/%d", s.Attempts, s.MaxAttempts)
		st := stepStateText(s)
		switch {
		case s.State == state.StepRunning && s.Progress != nil:
			st += " " + abbrev(progressText(s), 40)
		case s.State == state.StepWaiting && s.Signal != "":
			st += " for signal " + s.Signal
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", s.ID, s.Name, st, attempts, orDash(abbrev(s.Error, 50)), orDash(abbrev(string(s.Result), 50)))
	}
	return flushTable(tw)
}

// writeAudit prints an audit trail as a table.
func writeAudit(w io.Writer, trail []weft.AuditEntry) error {
	fmt.Fprintln(w)
	tw := newTable(w)
	fmt.Fprintln(tw, "TIME\tSTEP\tFROM\tTO\tATTEMPT\tENGINE\tREASON")
	for _, en := range trail {
		attempt := "-"
		if en.Attempt > 0 {
			attempt = strconv.Itoa(en.Attempt)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", en.At.Local().Format(timeLayout+".000"), orDash(en.Step), orDash(en.From), en.To,
			attempt, orDash(en.EngineID), orDash(abbrev(en.Reason, 60)))
	}
	return flushTable(tw)
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
		RunE: action(func(cmd *cobra.Command, args []string) error {
			id, err := parseID(args[0])
			if err != nil {
				return err
			}
			var body json.RawMessage
			if cmd.Flags().Changed("payload") {
				if !json.Valid([]byte(payload)) {
					return usageErrorf("--payload: not valid JSON: %s", abbrev(payload, 80))
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
			case errors.Is(err, weft.ErrInvalid):
				return usageErrorf("%v", err)
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
	var reason string
	cmd := &cobra.Command{
		Use:   "cancel ID",
		Short: "Cancel a task: its unfinished steps are cancelled and running handlers stopped",
		Long: `Cancel a task. The audit trail records who cancelled it (cli:<OS user>, or
api:<key name> through --server) and --reason.`,
		Example: `  weft cancel 42 --reason "customer withdrew the order"`,
		Args:    cobra.ExactArgs(1),
		RunE: action(func(cmd *cobra.Command, args []string) error {
			return a.change(cmd.Context(), args[0], reason, backend.Cancel, "task %d cancelled")
		}),
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded in the task's audit trail")
	return cmd
}

func (a *app) retryCommand() *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "retry ID",
		Short: "Retry a failed task from its failed steps",
		Long: `Retry a failed task: its failed and expired steps become ready with fresh
attempts, and the steps skipped because of them wait for them again. A running
'weft worker' (or the next one started) runs them. The audit trail records who
retried it (cli:<OS user>, or api:<key name> through --server) and --reason.`,
		Example: `  weft retry 42 --reason "the payment provider is back"`,
		Args:    cobra.ExactArgs(1),
		RunE: action(func(cmd *cobra.Command, args []string) error {
			return a.change(cmd.Context(), args[0], reason, backend.Retry, "task %d retried: its failed steps are queued to run again")
		}),
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded in the task's audit trail")
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

// conflictMessage returns the store's explanation of a conflict ("task 7 is
// completed and cannot be cancelled"), without the engine's "weft: cancel
// task 7: " prefix and the sentinel's ": conflict" suffix.
func conflictMessage(err error) error {
	for next := errors.Unwrap(err); next != nil && next != weft.ErrConflict; next = errors.Unwrap(err) {
		err = next
	}
	return errors.New(strings.TrimSuffix(err.Error(), ": "+weft.ErrConflict.Error()))
}
