package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/internal/cliview"
	"github.com/weftrun/weft/internal/taskview"
)

// stepCommand shows one step; its subcommands retry and resolve it. Step
// ids are in the ID column of `weft task`.
func (a *app) stepCommand() *cobra.Command {
	var jsonOut bool
	cmd := &cobra.Command{
		Use:   "step ID",
		Short: "Show one step of a task; retry or resolve it by hand",
		Long: `Show one step: its state, attempts, error, result, checkpoint and progress.
Step ids are in the ID column of 'weft task'. 'weft step retry' and
'weft step resolve' act on it; the audit trail records who acted (cli:<OS
user>, or api:<key name> through --server) and --reason.`,
		Example: `  weft step 17
  weft step retry 17 --reason "the upstream API is back"
  weft step resolve 17 --result '{"charged": true}' --reason "charged by hand"`,
		Args: cobra.ExactArgs(1),
		RunE: action(func(cmd *cobra.Command, args []string) error {
			id, err := parseIDOf("step", args[0])
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			e, err := a.backend(ctx, readOnlyDB)
			if err != nil {
				return err
			}
			defer e.Close()
			st, err := e.Step(ctx, id)
			if err != nil {
				return stepError(id, err)
			}
			if jsonOut {
				return writeJSON(a.stdout, st)
			}
			return cliview.Step(a.stdout, st)
		}),
	}
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print the step as JSON")
	cmd.AddCommand(a.stepRetryCommand(), a.stepResolveCommand())
	return cmd
}

func (a *app) stepRetryCommand() *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "retry ID",
		Short: "Run a failed or expired step again with fresh attempts",
		Long: `Make a failed or expired step ready again with a fresh attempt count. The steps
skipped because of it wait for it again, and a failed task runs again.`,
		Args: cobra.ExactArgs(1),
		RunE: action(func(cmd *cobra.Command, args []string) error {
			return a.stepChange(cmd.Context(), args[0], func(e backend, ctx context.Context, id int64) error {
				return e.RetryStep(ctx, id, reason)
			}, "step %d retried: it is queued to run again")
		}),
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded in the task's audit trail")
	return cmd
}

func (a *app) stepResolveCommand() *cobra.Command {
	var reason, result string
	cmd := &cobra.Command{
		Use:   "resolve ID",
		Short: "End a step by hand so that its dependents proceed",
		Long: `Mark a failed, expired, pending, ready or waiting step resolved by an
operator. Its dependents proceed, seeing --result as its result (default none),
and a task failed only because of it runs on. A running or finished step is
refused.`,
		Args: cobra.ExactArgs(1),
		RunE: action(func(cmd *cobra.Command, args []string) error {
			var res json.RawMessage
			if cmd.Flags().Changed("result") {
				if !json.Valid([]byte(result)) {
					return usageErrorf("--result: not valid JSON: %s", taskview.Abbrev(result, 80))
				}
				res = json.RawMessage(result)
			}
			return a.stepChange(cmd.Context(), args[0], func(e backend, ctx context.Context, id int64) error {
				return e.ResolveStep(ctx, id, res, reason)
			}, "step %d resolved: its dependents proceed")
		}),
	}
	cmd.Flags().StringVar(&result, "result", "", "the JSON result the step's dependents see")
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded in the task's audit trail")
	return cmd
}

// stepChange applies retry or resolve to a step and prints the
// confirmation.
func (a *app) stepChange(ctx context.Context, arg string, do func(backend, context.Context, int64) error, confirm string) error {
	id, err := parseIDOf("step", arg)
	if err != nil {
		return err
	}
	e, err := a.backend(ctx, existingDB)
	if err != nil {
		return err
	}
	defer e.Close()
	if err := do(e, ctx, id); err != nil {
		return stepError(id, err)
	}
	fmt.Fprintf(a.stdout, confirm+"\n", id)
	return nil
}

// stepError turns the engine's or server's errors about a step into the
// CLI's messages.
func stepError(id int64, err error) error {
	switch {
	case errors.Is(err, weft.ErrNotFound):
		return fmt.Errorf("step %d: not found", id)
	case errors.Is(err, weft.ErrConflict):
		return conflictMessage(err)
	}
	return err // an ErrInvalid is a usage error naming its flag (action)
}
