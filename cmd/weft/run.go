package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

func (a *app) runCommand() *cobra.Command {
	var (
		input       string
		key         string
		concurrency int
		jsonOut     bool
		capFlags    []string
		drain       time.Duration
	)
	cmd := &cobra.Command{
		Use:   "run FILE.yaml",
		Short: "Submit one task of a template and run it to its end with live progress",
		Long: `Load a workflow template, register it, submit one task and run an engine until
the task ends, showing its progress: a live view on a terminal, otherwise one
line per step state change and a summary line.

Only the built-in handlers exec and http are available. Exit status: 0 when
the task completed, 1 when it failed, was cancelled or expired, 2 for usage and
validation errors, 130 when interrupted: the engine then stops gracefully and
the task stays in the database for 'weft worker' to resume.`,
		Example: `  weft run examples/hello.yaml --input '{"name":"Ada"}'
  weft run deploy.yaml --json > task.json`,
		Args: cobra.ExactArgs(1),
		RunE: action(func(cmd *cobra.Command, args []string) error {
			if err := checkConcurrency(concurrency); err != nil {
				return err
			}
			if drain < 0 {
				return usageErrorf("--drain must not be negative")
			}
			caps, err := parseCaps(capFlags)
			if err != nil {
				return err
			}
			in, err := a.readInput(input)
			if err != nil {
				return err
			}
			return a.runTemplate(cmd.Context(), args[0], weft.Submission{Input: inputValue(in), Key: key},
				weft.Config{Concurrency: concurrency, NamespaceCaps: caps}, jsonOut, drain)
		}),
	}
	f := cmd.Flags()
	f.StringVar(&input, "input", "", "task input: JSON, @FILE or - for stdin (default {})")
	f.StringVar(&key, "key", "", "idempotency key: a task with this key is not run twice")
	f.IntVar(&concurrency, "concurrency", 10, "steps run at once")
	f.BoolVar(&jsonOut, "json", false, "print the final task as JSON on stdout (progress goes to stderr)")
	f.StringArrayVar(&capFlags, "cap", nil, "limit the steps of a namespace running at once, as NAMESPACE=N (repeatable)")
	f.DurationVar(&drain, "drain", 30*time.Second, "on interrupt, how long to wait for running steps before stopping them")
	return cmd
}

// runTemplate is `weft run`: register, submit, start and follow.
func (a *app) runTemplate(ctx context.Context, path string, sub weft.Submission, cfg weft.Config, jsonOut bool, drain time.Duration) error {
	w, err := a.loadTemplate(path)
	if err != nil {
		return err
	}
	e, err := a.open(ctx, cfg, false)
	if err != nil {
		return err
	}
	defer a.closeEngine(e)
	if err := a.register(ctx, e, path, w); err != nil {
		return err
	}
	if err := a.checkHandlers(path, e, w); err != nil {
		return err
	}
	sub.Workflow = w.Ref()
	res, err := e.Submit(ctx, sub)
	if err != nil {
		if errors.Is(err, weft.ErrInvalid) {
			return &exitError{code: exitUsage, err: err}
		}
		return fmt.Errorf("submit: %w", err)
	}
	id := res.Task.ID
	if res.Duplicate {
		fmt.Fprintf(a.stderr, "weft: task %d already exists with this idempotency key (%s); following it\n", id, res.Task.State)
	}
	if err := e.Start(ctx); err != nil {
		return fmt.Errorf("start engine: %w", err)
	}
	a.log.Info("running task", "task_id", id, "workflow", w.Ref(), "engine_id", e.ID())

	out := a.stdout
	if jsonOut {
		out = a.stderr
	}
	task, err := a.follow(ctx, e, id, out)
	bg := context.WithoutCancel(ctx)
	if ctx.Err() != nil {
		return a.interrupted(bg, e, id, drain)
	}
	stopCtx, cancel := context.WithTimeout(bg, drain)
	defer cancel()
	if serr := e.Stop(stopCtx); serr != nil {
		a.log.Warn("stop engine", "error", serr)
	}
	if err != nil {
		return fmt.Errorf("follow task %d: %w", id, err)
	}
	if jsonOut {
		if err := writeJSON(a.stdout, task); err != nil {
			return err
		}
	}
	if task.State != state.TaskCompleted {
		return exitWith(exitFailed)
	}
	return nil
}

// interrupted stops the engine of an interrupted run gracefully and says
// where the task stands.
func (a *app) interrupted(ctx context.Context, e *weft.Engine, id int64, drain time.Duration) error {
	fmt.Fprintf(a.stderr, "weft: interrupted; stopping (waiting up to %s for running steps, interrupt again to quit at once)\n", drain)
	stopCtx, cancel := context.WithTimeout(ctx, drain)
	defer cancel()
	if err := e.Stop(stopCtx); err != nil {
		a.log.Warn("stop engine", "error", err)
	}
	t, err := e.Get(ctx, id)
	switch {
	case err != nil:
		fmt.Fprintf(a.stderr, "weft: task %d: %v\n", id, err)
	case t.State.Terminal():
		fmt.Fprintf(a.stderr, "weft: task %d %s while stopping\n", id, t.State)
	default:
		fmt.Fprintf(a.stderr, "weft: task %d is %s; it stays in %s and 'weft worker' resumes it\n", id, t.State, a.dbURL())
	}
	return exitWith(exitInterrupted)
}

// follow renders the progress of a task on w until it ends or ctx is done,
// and returns its last snapshot.
func (a *app) follow(ctx context.Context, e *weft.Engine, id int64, w io.Writer) (*store.Task, error) {
	width, height, live := terminal(w)
	live = live && a.getenv("TERM") != "dumb"
	p := newProgress(w, progressOptions{live: live, color: live && a.getenv("NO_COLOR") == "", width: width, height: height})
	if _, _, tty := terminal(a.stderr); live && tty {
		a.logOut.hold()
		defer a.logOut.release()
	}
	type waited struct {
		task *store.Task
		err  error
	}
	done := make(chan waited, 1)
	go func() {
		t, err := e.Wait(ctx, id)
		done <- waited{t, err}
	}()
	tick := time.NewTicker(a.refresh)
	defer tick.Stop()
	bg := context.WithoutCancel(ctx)
	renderErr := func(err error) {
		if err != nil {
			a.log.Debug("render progress", "error", err)
		}
	}
	for {
		select {
		case r := <-done:
			if ctx.Err() != nil {
				if t, err := e.Get(bg, id); err == nil {
					renderErr(p.Update(t))
					return t, nil
				}
				return r.task, nil
			}
			if r.err != nil {
				return nil, r.err
			}
			renderErr(p.Finish(r.task))
			return r.task, nil
		case <-tick.C:
			t, err := e.Get(bg, id)
			if err != nil {
				a.log.Warn("read task", "task_id", id, "error", err)
				continue
			}
			renderErr(p.Update(t))
		}
	}
}
