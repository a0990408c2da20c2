package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/wire"
	"github.com/weftrun/weft/workflow"
)

// This file holds the task filter flags (tasks, cancel, retry, delete) and
// the bulk actions: cancel, retry and delete by filter, and delete by id.

// filterFlags select tasks.
type filterFlags struct {
	namespace, workflow, state  string
	tags                        []string
	schedule                    string
	createdAfter, createdBefore string
	attention                   bool
}

func (f *filterFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&f.state, "state", "", "only tasks in this state: "+joinStates(state.Tasks))
	fs.StringVar(&f.namespace, "namespace", "", "only tasks of this namespace")
	fs.StringVar(&f.workflow, "workflow", "", "only tasks of this workflow: NAME or NAMESPACE/NAME")
	fs.StringVar(&f.schedule, "schedule", "", "only tasks submitted by the schedule of this name (with --workflow to name its workflow)")
	fs.StringArrayVar(&f.tags, "tag", nil, "only tasks with this tag, KEY=VALUE (repeat: every one must match)")
	fs.StringVar(&f.createdAfter, "created-after", "", "only tasks created at or after: RFC 3339 or an age such as 2h (ago)")
	fs.StringVar(&f.createdBefore, "created-before", "", "only tasks created before: RFC 3339 or an age such as 30m (ago)")
	fs.BoolVar(&f.attention, "attention", false, "only tasks that need a person (a step failed, no worker serves a ready step's handler, a signal wait is overdue)")
}

// workflowFlag reads --workflow (NAMESPACE/NAME or NAME) with --namespace,
// as every way in reads a workflow filter (workflow.ParseFilter).
func workflowFlag(namespace, wf string) (ns, name string, err error) {
	ns, name, err = workflow.ParseFilter(namespace, wf)
	if err != nil {
		return "", "", flagError("--workflow", err)
	}
	return ns, name, nil
}

// filter reads the flags into a task filter.
func (f *filterFlags) filter() (weft.TaskFilter, error) {
	out := weft.TaskFilter{Namespace: f.namespace, State: state.Task(f.state), Schedule: f.schedule, Attention: f.attention}
	if f.state != "" && !out.State.Valid() {
		return out, usageErrorf("--state %q: not a task state (want one of %s)", f.state, joinStates(state.Tasks))
	}
	var err error
	if out.Namespace, out.Workflow, err = workflowFlag(f.namespace, f.workflow); err != nil {
		return out, err
	}
	for _, t := range f.tags {
		k, v, err := store.ParseTag(t)
		if err != nil {
			return out, flagError("--tag", err)
		}
		if out.Tags == nil {
			out.Tags = map[string]string{}
		}
		out.Tags[k] = v
	}
	now := time.Now()
	if out.CreatedAfter, err = agoFlag("--created-after", f.createdAfter, now); err != nil {
		return out, err
	}
	if out.CreatedBefore, err = agoFlag("--created-before", f.createdBefore, now); err != nil {
		return out, err
	}
	return out, nil
}

// agoFlag reads a time flag: RFC 3339, or an age before now ("" is none).
func agoFlag(name, v string, now time.Time) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	d, err := parseAge(v)
	if errors.Is(err, errNotPositive) {
		return time.Time{}, usageErrorf("%s %q: an age must be more than 0 (it counts back from now); give an age such as 2h or 7d, or an RFC 3339 time", name, v)
	}
	if err != nil {
		return time.Time{}, usageErrorf("%s %q: want an RFC 3339 time (2026-12-01T09:00:00Z) or an age such as 2h or 7d", name, v)
	}
	return now.Add(-d), nil
}

// errNotPositive is parseAge's error for an age of 0 or less.
var errNotPositive = errors.New("must be more than 0")

// parseAge reads a positive duration that may be given in whole days
// ("7d"); one of 0 or less is errNotPositive, with the duration.
func parseAge(v string) (time.Duration, error) {
	var d workflow.Duration
	if err := d.UnmarshalJSON([]byte(`"` + v + `"`)); err != nil {
		if neg, perr := time.ParseDuration(v); perr == nil && neg < 0 {
			return neg, errNotPositive
		}
		return 0, err
	}
	if d <= 0 {
		return time.Duration(d), errNotPositive
	}
	return time.Duration(d), nil
}

// wireFilter is a task filter as the API takes it.
func wireFilter(f weft.TaskFilter) wire.TaskFilter {
	w := wire.TaskFilter{Namespace: f.Namespace, Workflow: f.Workflow, State: string(f.State), Tags: f.Tags, Schedule: f.Schedule, Attention: f.Attention}
	for _, tf := range []struct {
		src time.Time
		dst **time.Time
	}{{f.CreatedAfter, &w.CreatedAfter}, {f.CreatedBefore, &w.CreatedBefore}, {f.FinishedBefore, &w.FinishedBefore}} {
		if !tf.src.IsZero() {
			t := tf.src
			*tf.dst = &t
		}
	}
	return w
}

// bulkFlags are the flags of an action by filter.
type bulkFlags struct {
	filterFlags
	all, dryRun bool
}

func (b *bulkFlags) add(fs *pflag.FlagSet) {
	b.filterFlags.add(fs)
	fs.BoolVar(&b.all, "all", false, "act on every task the action applies to (required when no filter is given)")
	fs.BoolVar(&b.dryRun, "dry-run", false, "print how many tasks the action would apply to and change nothing")
}

// given reports whether any filter flag was set.
func (b *bulkFlags) given(cmd *cobra.Command) bool {
	for _, name := range []string{"state", "namespace", "workflow", "tag", "created-after", "created-before", "attention", "all", "dry-run"} {
		if cmd.Flags().Changed(name) {
			return true
		}
	}
	return false
}

// bulkAction is one of the bulk actions.
type bulkAction string

const (
	bulkCancel bulkAction = "cancel"
	bulkRetry  bulkAction = "retry"
	bulkDelete bulkAction = "delete"
)

// bulkCall is one bulk call, local or through a server.
type bulkCall struct {
	action  bulkAction
	req     weft.BulkRequest
	archive string // delete: an archive file (local only)
}

// archiveGiven refuses an --archive given an empty name: the tasks would
// be deleted without being archived.
func archiveGiven(cmd *cobra.Command, archive string) error {
	if cmd.Flags().Changed("archive") && strings.TrimSpace(archive) == "" {
		return usageErrorf("--archive needs a file name: with none, the tasks would be deleted without an archive")
	}
	return nil
}

// runBulk applies a bulk action and prints its counts.
func (a *app) runBulk(ctx context.Context, c bulkCall) error {
	if c.archive != "" && a.serverURL() != "" {
		return usageErrorf("--archive writes a local file: it cannot be used with --server (run the command on a machine with database access, without --server)")
	}
	b, err := a.backend(ctx, existingDB)
	if err != nil {
		return err
	}
	defer b.Close()
	var res weft.BulkResult
	switch be := b.(type) {
	case localBackend:
		c.req.Actor = cliActor()
		if c.archive != "" && !c.req.DryRun {
			f, err := os.OpenFile(c.archive, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
			if err != nil {
				return usageErrorf("--archive: %v", err)
			}
			defer f.Close()
			c.req.Archive = weft.ArchiveTo(f)
		}
		switch c.action {
		case bulkCancel:
			res, err = be.CancelTasks(ctx, c.req)
		case bulkRetry:
			res, err = be.RetryTasks(ctx, c.req)
		default:
			res, err = be.DeleteTasks(ctx, c.req)
		}
	case remoteBackend:
		req := wire.BulkRequest{Filter: wireFilter(c.req.Filter), All: c.req.All, DryRun: c.req.DryRun, Reason: c.req.Reason, Force: c.req.Force}
		do := func(req wire.BulkRequest) (wire.BulkResult, error) {
			switch c.action {
			case bulkCancel:
				return be.CancelTasks(ctx, req)
			case bulkRetry:
				return be.RetryTasks(ctx, req)
			default:
				return be.DeleteTasks(ctx, req)
			}
		}
		// Task ids in requests of at most wire.MaxBulkIDs.
		batches := [][]int64{nil}
		if len(c.req.IDs) > 0 {
			batches = slices.Collect(slices.Chunk(c.req.IDs, wire.MaxBulkIDs))
		}
		for _, ids := range batches {
			var part weft.BulkResult
			part, err = a.followBulk(c.action.past(), ids, func(cursor int64, ids []int64) (wire.BulkResult, error) {
				req.IDs, req.Cursor = ids, cursor
				return do(req)
			})
			res = addBulk(res, part)
			if err != nil {
				break
			}
		}
	default:
		return fmt.Errorf("internal error: unknown backend %T", b)
	}
	if errors.Is(err, weft.ErrInvalid) {
		return err // action says which flag
	}
	if err != nil {
		return a.bulkFailed(c.action.past(), res, err)
	}
	a.printBulk(c.action, res)
	if len(c.req.IDs) > 0 && !res.DryRun && res.Skipped > 0 {
		// Tasks named one by one that were left are a failure of the
		// command, as the same action on one task is; a filter's are not.
		hint := ""
		if c.action == bulkDelete && !c.req.Force {
			hint = " (unfinished tasks are deleted only with --force, which cancels them first)"
		}
		were := "were"
		if res.Skipped == 1 {
			were = "was"
		}
		return &exitError{code: exitFailed, err: fmt.Errorf("%d of the tasks given %s not %s%s", res.Skipped, were, c.action.past(), hint)}
	}
	return nil
}

// followBulk sends a bulk action to a server until the server says it is
// complete: by filter (ids nil), each request going on from the cursor of
// the one before; by ids, each sent again with the ids the server did not
// reach. It adds up the answers and says on stderr how far it got.
func (a *app) followBulk(past string, ids []int64, send func(cursor int64, ids []int64) (wire.BulkResult, error)) (weft.BulkResult, error) {
	var res weft.BulkResult
	var cursor int64
	for {
		wr, err := send(cursor, ids)
		if err != nil {
			return res, err
		}
		res = addBulk(res, weft.BulkResult(wr))
		// A server that predates progress says neither complete nor what
		// remains: its answer is the whole action.
		if wr.DryRun || wr.Complete || wr.Remaining == 0 {
			return res, nil
		}
		if len(ids) > 0 {
			if wr.Matched <= 0 || wr.Matched >= len(ids) {
				return res, nil
			}
			ids = ids[wr.Matched:]
		} else {
			if wr.Next <= 0 {
				return res, nil
			}
			cursor = wr.Next
		}
		a.notice(slog.LevelInfo, fmt.Sprintf("%d tasks %s so far, %d remaining: going on", res.Done, past, wr.Remaining),
			"done", res.Done, "remaining", wr.Remaining)
	}
}

// addBulk adds the counts of a part of a bulk action to those of the whole.
func addBulk(whole, part weft.BulkResult) weft.BulkResult {
	whole.Matched += part.Matched
	whole.Done += part.Done
	whole.Skipped += part.Skipped
	whole.DryRun = part.DryRun
	return whole
}

// bulkFailed is the end of a bulk action that failed after res: it says
// what was done meanwhile, for the operator to run the command again.
func (a *app) bulkFailed(past string, res weft.BulkResult, err error) error {
	if res.Done > 0 {
		a.notice(slog.LevelWarn, fmt.Sprintf("%d tasks were %s before the error; run the command again to go on", res.Done, past), "done", res.Done)
	}
	return err
}

// past is the action's past participle: cancelled, retried, deleted.
func (b bulkAction) past() string {
	return map[bulkAction]string{bulkCancel: "cancelled", bulkRetry: "retried", bulkDelete: "deleted"}[b]
}

func (a *app) printBulk(action bulkAction, res weft.BulkResult) {
	past := action.past()
	if res.DryRun {
		fmt.Fprintf(a.stdout, "%d tasks would be %s (dry run: nothing changed)\n", res.Matched, past)
		return
	}
	fmt.Fprintf(a.stdout, "%d tasks %s", res.Done, past)
	if res.Skipped > 0 {
		fmt.Fprintf(a.stdout, ", %d skipped (not in a state the action applies to, or changed meanwhile)", res.Skipped)
	}
	fmt.Fprintln(a.stdout)
}

// bulkFromFlags builds a bulk call from the flags.
func (b *bulkFlags) request(reason string) (weft.BulkRequest, error) {
	f, err := b.filter()
	if err != nil {
		return weft.BulkRequest{}, err
	}
	if !f.Selects() && !b.all {
		return weft.BulkRequest{}, usageErrorf("give a task ID or a filter (--state, --namespace, --workflow, --tag, --created-after, --created-before, --attention), or --all to act on every task")
	}
	return weft.BulkRequest{Filter: f, All: b.all, DryRun: b.dryRun, Reason: reason}, nil
}

func (a *app) deleteCommand() *cobra.Command {
	var (
		bf      bulkFlags
		reason  string
		force   bool
		archive string
	)
	cmd := &cobra.Command{
		Use:   "delete [ID...]",
		Short: "Delete finished tasks, by id or by filter, with their steps and history",
		Long: `Delete tasks with their steps, results, audit trail, signals and tags. Give
task ids, or a filter. Only finished tasks (completed, failed, cancelled,
expired) are deleted: unfinished ones are left, unless --force cancels them
first; a task given by id that is left makes the command exit with status
1. Tasks are deleted in batches of 500, one transaction each: an
interrupted delete is continued by running it again. Each deletion is
recorded in the operator log with who deleted it and --reason.

With --archive FILE, each task is appended to FILE as one JSON line (the task
with its steps, and its audit trail), written and synced before it is deleted.`,
		Example: `  weft delete 42
  weft delete --workflow shop/checkout --state cancelled --tag env=staging --dry-run
  weft delete --state failed --created-before 30d --archive failed.jsonl --reason "quarterly cleanup"`,
		RunE: action(func(cmd *cobra.Command, args []string) error {
			if err := archiveGiven(cmd, archive); err != nil {
				return err
			}
			c := bulkCall{action: bulkDelete, archive: archive}
			if len(args) > 0 {
				if bf.given(cmd) {
					return usageErrorf("give task ids or a filter, not both")
				}
				for _, arg := range args {
					id, err := parseID(arg)
					if err != nil {
						return err
					}
					c.req.IDs = append(c.req.IDs, id)
				}
				c.req.Reason = reason
			} else {
				req, err := bf.request(reason)
				if err != nil {
					return err
				}
				c.req = req
			}
			c.req.Force = force
			return a.runBulk(cmd.Context(), c)
		}),
	}
	bf.add(cmd.Flags())
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded in the operator log")
	cmd.Flags().BoolVar(&force, "force", false, "cancel unfinished tasks first instead of leaving them")
	cmd.Flags().StringVar(&archive, "archive", "", "append each deleted task to this file as one JSON line first")
	return cmd
}

// bulkOrOne runs cancel or retry: by id as before, or by filter.
func (a *app) bulkOrOne(cmd *cobra.Command, args []string, bf *bulkFlags, reason string, act bulkAction,
	one func(backend, context.Context, int64, string) error, confirm string) error {
	if len(args) == 1 {
		if bf.given(cmd) {
			return usageErrorf("give a task ID or a filter, not both")
		}
		return a.change(cmd.Context(), args[0], reason, one, confirm)
	}
	req, err := bf.request(reason)
	if err != nil {
		return err
	}
	return a.runBulk(cmd.Context(), bulkCall{action: act, req: req})
}
