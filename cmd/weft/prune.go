package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/internal/cliview"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/wire"
	"github.com/weftrun/weft/workflow"
)

// This file holds prune (delete old finished tasks on demand) and retention
// (how long a namespace keeps them).

func (a *app) pruneCommand() *cobra.Command {
	var (
		st, olderThan, namespace, archive string
		dryRun                            bool
	)
	cmd := &cobra.Command{
		Use:   "prune --state STATE --older-than AGE",
		Short: "Delete the tasks in a final state that finished longer ago than an age",
		Long: `Delete the tasks in a final state (completed, failed, cancelled, expired) that
finished more than --older-than ago, with their steps, results, audit trail,
signals and tags, in batches of 500 (one transaction each: an interrupted prune
is continued by running it again).

With --archive FILE, each task is appended to FILE as one JSON line (the task
with its steps, and its audit trail), written and synced before the delete
commits.`,
		Example: `  weft prune --state completed --older-than 7d --dry-run
  weft prune --state failed --older-than 30d --archive failed-2026-11.jsonl`,
		Args: cobra.NoArgs,
		RunE: action(func(cmd *cobra.Command, _ []string) error {
			s := state.Task(st)
			switch s {
			case state.TaskCompleted, state.TaskFailed, state.TaskCancelled, state.TaskExpired:
			default:
				return usageErrorf("--state is required: completed, failed, cancelled or expired (got %q)", st)
			}
			age, err := parseAge(olderThan)
			var fe *weft.FieldError
			if errors.Is(err, errNotPositive) && errors.As(weft.CheckPruneAge(s, age), &fe) {
				return usageErrorf("--older-than %s: %s (weft delete --state %s)", olderThan, fe.Problem, st)
			}
			if err != nil {
				return usageErrorf("--older-than %q: want an age such as 7d, 12h or 90m", olderThan)
			}
			if err := archiveGiven(cmd, archive); err != nil {
				return err
			}
			ctx := cmd.Context()
			reason := fmt.Sprintf("pruned: %s older than %s", st, olderThan)
			if a.serverURL() != "" {
				if archive != "" {
					return usageErrorf("--archive writes a local file: it cannot be used with --server (run prune without --server on a machine with database access)")
				}
				b, err := a.backend(ctx, existingDB)
				if err != nil {
					return err
				}
				defer b.Close()
				req := wire.PruneRequest{State: st, OlderThan: olderThan, Namespace: namespace, DryRun: dryRun}
				total, err := a.followBulk(bulkDelete.past(), nil, func(cursor int64, _ []int64) (wire.BulkResult, error) {
					req.Cursor = cursor
					return b.(remoteBackend).Prune(ctx, req)
				})
				if err != nil {
					return a.bulkFailed(bulkDelete.past(), total, err)
				}
				a.printBulk(bulkDelete, total)
				return nil
			}
			return a.runBulk(ctx, bulkCall{action: bulkDelete, archive: archive, req: weft.BulkRequest{All: true, DryRun: dryRun, Reason: reason,
				Filter: weft.TaskFilter{State: s, Namespace: namespace, FinishedBefore: time.Now().Add(-age)}}})
		}),
	}
	f := cmd.Flags()
	f.StringVar(&st, "state", "", "the final state of the tasks to delete: completed, failed, cancelled or expired")
	f.StringVar(&olderThan, "older-than", "", "delete tasks that finished longer ago than this: 7d, 12h, 90m")
	f.StringVar(&namespace, "namespace", "", "only tasks of this namespace")
	f.StringVar(&archive, "archive", "", "append each task to this file as one JSON line before deleting it")
	f.BoolVar(&dryRun, "dry-run", false, "print how many tasks would be deleted and change nothing")
	return cmd
}

func (a *app) retentionCommand() *cobra.Command {
	keep := map[state.Task]*string{}
	var jsonOut bool
	cmd := &cobra.Command{
		Use:   "retention [NAMESPACE]",
		Short: "Show or set how long a namespace keeps its finished tasks",
		Long: `Without flags, list the retention set on each namespace. With a namespace and
one or more of --completed, --failed, --cancelled and --expired, set how long
its finished tasks in that state are kept (0 clears it). The maintenance
leader deletes older ones in small batches every minute. A workflow's own
retention (retention: in its template) takes precedence for its tasks. Each
change is recorded in the operator log.`,
		Example: `  weft retention shop --completed 7d --failed 30d --cancelled 1d
  weft retention shop --cancelled 0
  weft retention`,
		Args: cobra.MaximumNArgs(1),
		RunE: action(func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			set := map[state.Task]time.Duration{}
			for st, v := range keep {
				if !cmd.Flags().Changed(string(st)) {
					continue
				}
				if *v == "0" {
					set[st] = 0
					continue
				}
				d, err := parseAge(*v)
				if err != nil {
					return usageErrorf("--%s %q: want a duration such as 7d, 12h or 90m, or 0 to clear", st, *v)
				}
				if err := workflow.CheckRetention(d); err != nil {
					return usageErrorf("--%s %q: %v, or 0 to clear", st, *v, err)
				}
				set[st] = d
			}
			if len(set) > 0 && len(args) == 0 {
				return usageErrorf("name the namespace to set the retention of: weft retention NAMESPACE --completed 7d")
			}
			if len(set) == 0 && len(args) == 1 {
				return usageErrorf("give --completed, --failed, --cancelled or --expired to set %s's retention (weft retention alone lists them)", args[0])
			}
			b, err := a.backend(ctx, existingDB)
			if err != nil {
				return err
			}
			defer b.Close()
			var list []wire.RetentionSetting
			switch be := b.(type) {
			case localBackend:
				for st, d := range set {
					if err := be.SetRetention(ctx, args[0], st, d, weft.Operator{Actor: cliActor()}); err != nil {
						return err
					}
				}
				rs, err := be.Retentions(ctx)
				if err != nil {
					return err
				}
				list = wire.List(rs, wire.RetentionSettingOf)
			case remoteBackend:
				var rl wire.RetentionList
				if len(set) > 0 {
					body := map[string]string{}
					for st, d := range set {
						body[string(st)] = ""
						if d > 0 {
							body[string(st)] = d.String()
						}
					}
					rl, err = be.SetRetention(ctx, args[0], body)
				} else {
					rl, err = be.Client.Retentions(ctx)
				}
				if err != nil {
					return err
				}
				list = rl.Retention
			default:
				return fmt.Errorf("internal error: unknown backend %T", b)
			}
			return writeList(a, list, jsonOut, "no namespace retention set", cliview.Retentions)
		}),
	}
	for _, st := range []state.Task{state.TaskCompleted, state.TaskFailed, state.TaskCancelled, state.TaskExpired} {
		v := new(string)
		keep[st] = v
		cmd.Flags().StringVar(v, string(st), "", "keep "+string(st)+" tasks this long: 7d, 12h, 90m (0 clears)")
	}
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print the retentions as JSON")
	return cmd
}
