package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/client"
	"github.com/weftrun/weft/workflow"
)

func (a *app) registerCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "register FILE.yaml...",
		Short: "Register workflow templates and their schedules without submitting a task",
		Long: `Register workflow versions from templates, with their schedules, without
submitting a task: workers then run tasks submitted by name (weft submit
NAMESPACE/NAME) and the schedules' ticks. Each file prints
"FILE: registered namespace/name@version (N steps, M schedules)".

Registering the identical definition again changes nothing; a different
definition under a registered version is refused (give it a new version).
The newest registered version's schedules are the workflow's: a version
that drops a schedule removes it.

Locally every file is checked before any is registered, so a file with
problems registers nothing. With --server the server checks and registers
each file in turn. Either way, a version already registered with a
different definition stops the command at its file: the files before it,
each printed, stay registered.`,
		Example: `  weft register examples/nightly-report.yaml
  weft register --server http://weft:8080 workflows/*.yaml`,
		Args: cobra.MinimumNArgs(1),
		RunE: action(func(cmd *cobra.Command, args []string) error {
			if a.serverURL() != "" {
				return a.registerOnServer(cmd.Context(), args)
			}
			ws := make([]*workflow.Workflow, len(args))
			failed := false
			for i, path := range args {
				w, err := workflow.Load(path)
				if err != nil {
					a.printProblems(err)
					failed = true
				}
				ws[i] = w
			}
			if failed {
				return exitWith(exitUsage)
			}
			de, err := a.open(cmd.Context(), weft.Config{}, createDB)
			if err != nil {
				return err
			}
			defer a.closeEngine(de)
			e := de.Engine
			for i, path := range args {
				if err := a.register(cmd.Context(), e, path, ws[i]); err != nil {
					return err
				}
				a.registered(path, ws[i].Ref(), len(ws[i].Steps), len(ws[i].Schedules))
			}
			return nil
		}),
	}
}

// registered prints the confirmation of one registered template.
func (a *app) registered(path, ref string, steps, schedules int) {
	fmt.Fprintf(a.stdout, "%s: registered %s (%d steps, %d schedules)\n", path, ref, steps, schedules)
}

// registerOnServer registers each template through the server, which
// checks it: a template's problems are printed with file and line and end
// the command with exit status 2.
func (a *app) registerOnServer(ctx context.Context, paths []string) error {
	c, err := a.serverClient()
	if err != nil {
		return err
	}
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			return usageErrorf("%v", err)
		}
		w, err := c.RegisterTemplate(ctx, path, data)
		var apiErr *client.Error
		if errors.As(err, &apiErr) && len(apiErr.Problems) > 0 {
			for _, p := range apiErr.Problems {
				fmt.Fprintln(a.stderr, (&workflow.DefinitionError{File: path, Line: p.Line, Step: p.Step, Field: p.Field, Msg: p.Message}).Error())
			}
			return exitWith(exitUsage)
		}
		if err != nil {
			return fmt.Errorf("register %s on %s: %w", path, a.serverURL(), err)
		}
		var def workflow.Workflow
		if err := json.Unmarshal(w.Definition, &def); err != nil {
			return fmt.Errorf("register %s on %s: read the registered definition: %w", path, a.serverURL(), err)
		}
		a.registered(path, w.Ref, len(def.Steps), len(def.Schedules))
	}
	return nil
}
