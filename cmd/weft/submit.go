package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/weftdb"
	"github.com/weftrun/weft/workflow"
)

// submissionFlags are the flags of a submission, shared by submit and run.
type submissionFlags struct {
	input, key, runAt, goodUntil string
	priority                     int
	onConflict                   string
	tags                         []string
}

func (f *submissionFlags) add(fs *pflag.FlagSet, keyHelp string) {
	fs.StringVar(&f.input, "input", "", "task input: JSON, @FILE or - for stdin, at most 16 MiB (default {})")
	fs.StringVar(&f.key, "key", "", keyHelp)
	fs.IntVar(&f.priority, "priority", 0, "task priority, from -1000000 to 1000000: higher runs first")
	fs.StringVar(&f.runAt, "run-at", "", "start no earlier than this time: RFC 3339 (2026-12-01T09:00:00Z) or a delay from now (10m)")
	fs.StringVar(&f.goodUntil, "good-until", "", "expire the task if no step started by then: RFC 3339 or a delay from now (1h)")
	fs.StringVar(&f.onConflict, "on-conflict", "", "when the idempotency key exists: return (the existing task) or supersede (cancel it if unfinished and submit anew); default: the workflow's on_conflict")
	fs.StringArrayVar(&f.tags, "tag", nil, "label the task with KEY=VALUE (repeatable); 'weft tasks --tag' and the bulk actions filter by tags")
}

// submission reads the flags into a submission.
func (f *submissionFlags) submission(a *app) (weft.Submission, error) {
	in, err := a.readInput(f.input)
	if err != nil {
		return weft.Submission{}, err
	}
	s := weft.Submission{Input: in, Key: f.key, Priority: f.priority, OnConflict: workflow.OnConflict(f.onConflict)}
	for _, t := range f.tags {
		k, v, err := store.SplitTag(t)
		if err != nil {
			return s, flagError("--tag", err)
		}
		if _, dup := s.Tags[k]; dup {
			return s, usageErrorf("--tag %s is given twice", k)
		}
		if s.Tags == nil {
			s.Tags = map[string]string{}
		}
		s.Tags[k] = v
	}
	now := time.Now()
	if s.RunAt, err = timeFlag("--run-at", f.runAt, now); err != nil {
		return s, err
	}
	if s.GoodUntil, err = timeFlag("--good-until", f.goodUntil, now); err != nil {
		return s, err
	}
	if !s.GoodUntil.IsZero() && !s.GoodUntil.After(now) {
		return s, usageErrorf("--good-until %s is in the past", f.goodUntil)
	}
	return s, nil
}

// timeFlag reads a time flag: RFC 3339, or a delay from now ("" is none).
func timeFlag(name, v string, now time.Time) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return time.Time{}, usageErrorf("%s %q: want an RFC 3339 time (2026-12-01T09:00:00Z) or a delay such as 10m", name, v)
	}
	return now.Add(d), nil
}

func (a *app) submitCommand() *cobra.Command {
	var sf submissionFlags
	cmd := &cobra.Command{
		Use:   "submit FILE.yaml|NAMESPACE/NAME[@VERSION]",
		Short: "Submit a task and print its id",
		Long: `Submit one task of a workflow and print its id alone on stdout. A template file
is registered first; a NAMESPACE/NAME reference names a workflow already
registered in the database (the newest version unless @VERSION is given).

A submission whose idempotency key already exists prints the existing task's id
and says so on stderr. Run 'weft worker' to execute submitted tasks.`,
		Example: `  id=$(weft submit examples/hello.yaml --input '{"name":"Ada"}')
  weft submit examples/hello --key order-42
  weft submit examples/hello --priority 5 --run-at 10m --good-until 2h
  weft submit shop/checkout --tag env=staging --tag team=payments`,
		Args: cobra.ExactArgs(1),
		RunE: action(func(cmd *cobra.Command, args []string) error {
			sub, err := sf.submission(a)
			if err != nil {
				return err
			}
			return a.submit(cmd.Context(), args[0], sub)
		}),
	}
	sf.add(cmd.Flags(), "idempotency key: a second submission with it returns the first task")
	return cmd
}

// isTemplateFile reports whether a submit target names a template file
// rather than a registered workflow.
func isTemplateFile(target string) bool {
	if strings.HasSuffix(target, ".yaml") || strings.HasSuffix(target, ".yml") {
		return true
	}
	fi, err := os.Stat(target)
	return err == nil && fi.Mode().IsRegular()
}

func (a *app) submit(ctx context.Context, target string, sub weft.Submission) error {
	var w *workflow.Workflow
	if isTemplateFile(target) {
		var err error
		if w, err = a.loadTemplate(target); err != nil {
			return err
		}
		sub.Workflow = w.Ref()
	} else {
		if _, _, _, err := workflow.ParseRef(target); err != nil {
			return usageErrorf("%q is neither a template file nor a workflow reference NAMESPACE/NAME[@VERSION]", target)
		}
		sub.Workflow = target
	}
	how := createDB
	if w == nil {
		how = existingDB // a reference to a registered workflow: the database must exist
	}
	b, err := a.backend(ctx, how)
	if err != nil {
		return err
	}
	defer b.Close()
	if w != nil {
		if err := b.RegisterTemplate(ctx, target, w); err != nil {
			return err
		}
	}
	res, err := b.Submit(ctx, sub)
	switch {
	case errors.Is(err, weft.ErrInvalid):
		return err // action says which flag
	case errors.Is(err, weft.ErrNotFound):
		return fmt.Errorf("workflow %s is not registered in %s (submit its template file to register it)", target, b.Where())
	case err != nil:
		return fmt.Errorf("submit %s: %w", target, err)
	}
	fmt.Fprintln(a.stdout, res.Task.ID)
	if res.Duplicate {
		a.notice(slog.LevelInfo, fmt.Sprintf("task %d already existed with this idempotency key (%s); not submitted again", res.Task.ID, res.Task.State), "task_id", res.Task.ID)
	}
	if res.Superseded != 0 {
		a.notice(slog.LevelInfo, fmt.Sprintf("task %d supersedes task %d, which held its idempotency key", res.Task.ID, res.Superseded), "task_id", res.Task.ID)
	}
	return nil
}

func (a *app) workerCommand() *cobra.Command {
	var (
		eng         engineFlags
		metricsAddr string
	)
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Run an engine until signalled, resuming unfinished work",
		Long: `Run an engine on the database until SIGINT or SIGTERM: it claims the ready steps
of every task whose handlers it has (the built-ins exec and http), including
those that an interrupted 'weft run' or a crashed engine left behind.

On SIGINT or SIGTERM it stops claiming and waits up to --drain for running
steps, heartbeating meanwhile so that no other engine takes them over; those
still running are then stopped and returned to the queue for the next engine.
A repeated SIGTERM is ignored; a second SIGINT cuts the drain short. Either
way the worker exits 0 once its engine is marked stopped.

With --metrics-addr it serves the engine's Prometheus metrics on /metrics (the
same as weft serve's, without the API's), and /health/live and /health/ready.`,
		Args: cobra.NoArgs,
		RunE: action(func(cmd *cobra.Command, _ []string) error {
			cfg, err := eng.config(a.config)
			if err != nil {
				return err
			}
			return a.work(cmd.Context(), cfg, eng.drain, metricsAddr)
		}),
	}
	f := cmd.Flags()
	eng.add(f, "on shutdown, how long to wait for running steps before stopping them")
	f.StringVar(&metricsAddr, "metrics-addr", "", "serve Prometheus metrics on http://ADDR/metrics (HOST:PORT; default: none)")
	return localOnlyCommand(cmd, "it runs an engine on the database (remote workers join a server with a worker client; see docs/remote-workers.md)")
}

// work runs an engine until ctx is done, then stops it within drain.
func (a *app) work(ctx context.Context, cfg weft.Config, drain time.Duration, metricsAddr string) error {
	if metricsAddr != "" {
		if err := checkHostPort(a.config, "metrics-addr", metricsAddr); err != nil {
			return err
		}
	}
	a.runsEngine()
	de, err := a.open(ctx, cfg, createDB)
	if err != nil {
		return err
	}
	defer a.closeEngine(de)
	e := de.Engine
	if metricsAddr != "" {
		stop, err := a.serveMetrics(e, metricsAddr)
		if err != nil {
			return err
		}
		defer stop()
	}
	if err := e.Start(ctx); err != nil {
		return fmt.Errorf("start engine: %w", err)
	}
	a.log.Info("worker started", "db", weftdb.Redact(a.dbURL()), "engine_id", e.ID(), "concurrency", cfg.Concurrency)
	<-ctx.Done()
	a.log.Info("worker stopping", "engine_id", e.ID(), "drain", drain)
	stopCtx, cancel := a.stopContext(ctx, drain)
	defer cancel()
	if err := e.Stop(stopCtx); err != nil {
		return fmt.Errorf("stop engine: %w", err)
	}
	a.log.Info("worker stopped", "engine_id", e.ID())
	return nil
}
