package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/internal/taskview"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/weftdb"
	"github.com/weftrun/weft/wire"
)

func (a *app) runCommand() *cobra.Command {
	var (
		sf      submissionFlags
		jsonOut bool
		eng     engineFlags
	)
	cmd := &cobra.Command{
		Use:   "run FILE.yaml",
		Short: "Submit one task of a template and run it to its end with live progress",
		Long: `Load a workflow template, register it, submit one task and run an engine until
the task ends, showing its progress: a live view on a terminal, otherwise one
line per step state change and a summary line. The engine runs only this task;
other tasks in the database are left to 'weft worker'.

With --server the template is registered and the task submitted through the
server, whose engines and workers run it, and the progress follows the
server's event stream; an interrupt stops following and leaves the task to
them.

Only the built-in handlers exec and http are available. Exit status: 0 when
the task completed, 1 when it failed, was cancelled or expired, 2 for usage and
validation errors, 130 when interrupted: the engine then stops gracefully and
the task stays in the database for 'weft worker' to resume.`,
		Example: `  weft run examples/hello.yaml --input '{"name":"Ada"}'
  weft run deploy.yaml --json > task.json`,
		Args: cobra.ExactArgs(1),
		RunE: action(func(cmd *cobra.Command, args []string) error {
			sub, err := sf.submission(a)
			if err != nil {
				return err
			}
			if a.serverURL() != "" {
				for _, name := range []string{"concurrency", "cap", "drain", "lease-ttl", "heartbeat-interval", "stale-after", "max-pressure"} {
					if cmd.Flags().Changed(name) {
						return usageErrorf("--%s configures a local engine; with a server, its engines run the task", name)
					}
				}
				return a.runRemote(cmd.Context(), args[0], sub, jsonOut)
			}
			cfg, err := eng.config(a.config)
			if err != nil {
				return err
			}
			return a.runTemplate(cmd.Context(), args[0], sub, cfg, jsonOut, eng.drain)
		}),
	}
	f := cmd.Flags()
	sf.add(f, "idempotency key: a task with this key is not run twice")
	f.BoolVar(&jsonOut, "json", false, "print the final task as JSON on stdout (progress goes to stderr)")
	eng.add(f, "on interrupt, how long to wait for running steps before stopping them")
	return cmd
}

// runTemplate is `weft run`: register, submit, then run the task with an
// engine that claims only its steps, following its progress.
func (a *app) runTemplate(ctx context.Context, path string, sub weft.Submission, cfg weft.Config, jsonOut bool, drain time.Duration) error {
	w, err := a.loadTemplate(path)
	if err != nil {
		return err
	}
	if len(cfg.Namespaces) > 0 && !slices.Contains(cfg.Namespaces, w.Namespace) {
		return usageErrorf("%s: the template's namespace %q is not among them: this run's engine would never claim its task",
			a.config.Describe("namespaces"), w.Namespace)
	}
	// RunTask stops the engine within ShutdownTimeout, which Config reads
	// as "the default" when zero; --drain 0 means not to wait at all.
	cfg.ShutdownTimeout = max(drain, time.Nanosecond)
	a.runsEngine()
	de, err := a.open(ctx, cfg, createDB)
	if err != nil {
		return err
	}
	defer a.closeEngine(de)
	e := de.Engine
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
			return err // action says which flag
		}
		return fmt.Errorf("submit: %w", err)
	}
	id := res.Task.ID
	if res.Duplicate {
		a.notice(slog.LevelInfo, fmt.Sprintf("task %d already exists with this idempotency key (%s); following it", id, res.Task.State), "task_id", id)
	}
	a.log.Info("running task", "task_id", id, "workflow", w.Ref(), "engine_id", e.ID())

	out := a.stdout
	if jsonOut {
		out = a.progressErr()
	}
	run := startRun(ctx, e, id)
	a.follow(ctx, e, id, out, run)
	if ctx.Err() != nil {
		return a.interrupted(context.WithoutCancel(ctx), e, id, drain, run)
	}
	task := run.task
	if task == nil || !task.State.Terminal() {
		return fmt.Errorf("run task %d: %w", id, run.err)
	}
	if run.err != nil {
		// The task ended; only stopping the engine went wrong.
		a.log.Warn("stop engine", "error", run.err)
	}
	if jsonOut {
		if err := writeJSON(a.stdout, wire.TaskOf(*task)); err != nil {
			return err
		}
	}
	if task.State != state.TaskCompleted {
		return exitWith(exitFailed)
	}
	return nil
}

// taskRun is an Engine.RunTask in progress.
type taskRun struct {
	done chan struct{} // closed when RunTask returned
	task *weft.Task    // what RunTask returned, set before done is closed
	err  error
}

// startRun calls e.RunTask(ctx, id) in a goroutine.
func startRun(ctx context.Context, e *weft.Engine, id int64) *taskRun {
	r := &taskRun{done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.task, r.err = e.RunTask(ctx, id)
	}()
	return r
}

// interrupted waits for the interrupted run to stop its engine gracefully
// and says where the task stands.
func (a *app) interrupted(ctx context.Context, e *weft.Engine, id int64, drain time.Duration, run *taskRun) error {
	a.notice(slog.LevelWarn, fmt.Sprintf("interrupted; stopping (waiting up to %s for running steps, interrupt again to stop them at once)", drain), "task_id", id)
	select {
	case <-run.done:
	case <-a.hurried().Done():
		// A second interrupt: a Stop whose context is done cuts the
		// drain of RunTask's short (or makes it empty).
		if err := e.Stop(a.hurried()); err != nil {
			a.log.Warn("stop engine", "error", err)
		}
		<-run.done
	}
	a.log.Debug("run task", "task_id", id, "error", run.err)
	t, err := e.Get(ctx, id)
	switch {
	case err != nil:
		a.notice(slog.LevelError, fmt.Sprintf("task %d: %v", id, err), "task_id", id)
	case t.State.Terminal():
		a.notice(slog.LevelWarn, fmt.Sprintf("task %d %s while stopping", id, t.State), "task_id", id)
	default:
		a.notice(slog.LevelWarn, fmt.Sprintf("task %d is %s; it stays in %s and 'weft worker' resumes it", id, t.State, weftdb.Redact(a.dbURL())), "task_id", id)
	}
	return exitWith(exitInterrupted)
}

// follow renders the progress of task id on w, polling it, until the run
// returns or ctx is done. Only a task that ended gets the summary line.
func (a *app) follow(ctx context.Context, e *weft.Engine, id int64, w io.Writer, run *taskRun) {
	width, height, live := terminal(w)
	live = live && a.getenv("TERM") != "dumb"
	p := taskview.New(w, taskview.Options{Live: live, Color: live && a.getenv("NO_COLOR") == "", Width: width, Height: height, DB: a.dbFlag})
	if _, _, tty := terminal(a.stderr); live && tty {
		a.logOut.hold()
		defer a.logOut.release()
	}
	renderErr := func(err error) {
		if err != nil {
			a.log.Debug("render progress", "error", err)
		}
	}
	bg := context.WithoutCancel(ctx)
	update := func() {
		t, err := e.Get(bg, id)
		if err != nil {
			a.log.Warn("read task", "task_id", id, "error", err)
			return
		}
		w := wire.TaskOf(*t)
		renderErr(p.Update(&w))
	}
	tick := time.NewTicker(a.refresh)
	defer tick.Stop()
	for {
		select {
		case <-run.done:
			if t := run.task; ctx.Err() == nil && t != nil && t.State.Terminal() {
				w := wire.TaskOf(*t)
				renderErr(p.Finish(&w))
			} else {
				update()
			}
			return
		case <-ctx.Done():
			update()
			return
		case <-tick.C:
			update()
		}
	}
}
