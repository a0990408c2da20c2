package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/weftdb"
	"github.com/weftrun/weft/workflow"
)

// builtinHandlers are the handlers the CLI's engines can run.
var builtinHandlers = []string{"exec", "http"}

// loadTemplate loads a workflow template. Its problems are printed on
// stderr one per line, each with file and line, and end the command with
// exit status 2.
func (a *app) loadTemplate(path string) (*workflow.Workflow, error) {
	w, err := workflow.Load(path)
	if err != nil {
		a.printProblems(err)
		return nil, exitWith(exitUsage)
	}
	return w, nil
}

// register registers a loaded template. loadTemplate has validated it as
// Register does.
func (a *app) register(ctx context.Context, e *weft.Engine, path string, w *workflow.Workflow) error {
	err := e.Register(ctx, w)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, weft.ErrConflict):
		return fmt.Errorf("%s: %s is already registered in %s with a different definition; give the changed template a new version",
			path, w.Ref(), weftdb.Redact(a.dbURL()))
	default:
		return fmt.Errorf("register %s: %w", path, err)
	}
}

// checkHandlers refuses a workflow naming a handler the CLI does not have:
// it prints one line per step that uses one and ends with exit status 2.
func (a *app) checkHandlers(path string, e *weft.Engine, w *workflow.Workflow) error {
	missing := e.MissingHandlers(w)
	if len(missing) == 0 {
		return nil
	}
	for _, s := range w.Steps {
		if slices.Contains(missing, s.Handler) {
			fmt.Fprintf(a.stderr, "%s: step %q: handler %q is not available in the weft CLI (built-in handlers: %s)\n",
				path, s.Name, s.Handler, strings.Join(builtinHandlers, ", "))
		}
	}
	return exitWith(exitUsage)
}

// printProblems prints each problem of a template error on its own line.
func (a *app) printProblems(err error) {
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range joined.Unwrap() {
			fmt.Fprintln(a.stderr, e)
		}
		return
	}
	fmt.Fprintln(a.stderr, err)
}

func (a *app) validateCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "validate FILE.yaml...",
		Short: "Check workflow templates without registering them",
		Long: `Check workflow templates with the same checks as registration, including the
configs of built-in handlers, without touching the database. Each valid file
prints "FILE: ok (namespace/name@version, N steps)"; each problem is printed on
stderr on its own line with file and line, and the exit status is 2.`,
		Args: cobra.MinimumNArgs(1),
		RunE: action(func(cmd *cobra.Command, args []string) error {
			if a.serverURL() != "" {
				return a.validateOnServer(cmd.Context(), args)
			}
			failed := false
			for _, path := range args {
				w, err := workflow.Load(path)
				if err != nil {
					failed = true
					a.printProblems(err)
					continue
				}
				fmt.Fprintf(a.stdout, "%s: ok (%s, %d steps)\n", path, w.Ref(), len(w.Steps))
			}
			if failed {
				return exitWith(exitUsage)
			}
			return nil
		}),
	}
}

// validateOnServer is validate with --server: the server checks each
// template, so a template is judged by the version of weft that will run it.
func (a *app) validateOnServer(ctx context.Context, paths []string) error {
	c, err := a.serverClient()
	if err != nil {
		return err
	}
	failed := false
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			fmt.Fprintln(a.stderr, err)
			failed = true
			continue
		}
		v, err := c.ValidateTemplate(ctx, path, data)
		if err != nil {
			return fmt.Errorf("validate %s on %s: %w", path, a.serverURL(), err)
		}
		if v.Valid {
			fmt.Fprintf(a.stdout, "%s: ok (%s, %d steps)\n", path, v.Workflow, v.Steps)
			continue
		}
		failed = true
		for _, p := range v.Problems {
			fmt.Fprintln(a.stderr, (&workflow.DefinitionError{File: path, Line: p.Line, Step: p.Step, Field: p.Field, Msg: p.Message}).Error())
		}
	}
	if failed {
		return exitWith(exitUsage)
	}
	return nil
}
