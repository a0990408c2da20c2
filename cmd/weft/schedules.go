package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/client"
	"github.com/weftrun/weft/internal/cliview"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/wire"
)

// scheduleBackend is what the schedules commands need: the local engine
// or a weft server.
type scheduleBackend interface {
	Schedules(ctx context.Context, f weft.ScheduleFilter) ([]wire.Schedule, error)
	ScheduleAudit(ctx context.Context, k wire.ScheduleKey) ([]wire.ScheduleAuditEntry, error)
	Pause(ctx context.Context, k wire.ScheduleKey, paused bool, reason string) (wire.Schedule, error)
	Close()
}

type localSchedules struct{ localBackend }

func (l localSchedules) Pause(ctx context.Context, k wire.ScheduleKey, paused bool, reason string) (wire.Schedule, error) {
	op := weft.Operator{Actor: cliActor(), Reason: reason}
	act := l.Engine.ResumeSchedule
	if paused {
		act = l.Engine.PauseSchedule
	}
	s, err := act(ctx, weft.ScheduleKey(k), op)
	return wire.ScheduleOf(s), err
}
func (l localSchedules) Schedules(ctx context.Context, f weft.ScheduleFilter) ([]wire.Schedule, error) {
	list, err := l.Engine.Schedules(ctx, f)
	return wire.List(list, wire.ScheduleOf), err
}
func (l localSchedules) ScheduleAudit(ctx context.Context, k wire.ScheduleKey) ([]wire.ScheduleAuditEntry, error) {
	audit, err := l.Engine.ScheduleAudit(ctx, weft.ScheduleKey(k))
	return wire.List(audit, wire.ScheduleAuditEntryOf), err
}

type remoteSchedules struct{ *client.Client }

func (r remoteSchedules) ScheduleAudit(ctx context.Context, k wire.ScheduleKey) ([]wire.ScheduleAuditEntry, error) {
	d, err := r.Client.Schedule(ctx, k)
	return d.Audit, err
}

func (r remoteSchedules) Pause(ctx context.Context, k wire.ScheduleKey, paused bool, reason string) (wire.Schedule, error) {
	if paused {
		return r.Client.PauseSchedule(ctx, k, reason)
	}
	return r.Client.ResumeSchedule(ctx, k, reason)
}

func (r remoteSchedules) Close() {}

// schedules opens the local database (read-only when only reading) or a
// client of the server.
func (a *app) schedules(ctx context.Context, how access) (scheduleBackend, error) {
	if a.serverURL() != "" {
		c, err := a.serverClient()
		if err != nil {
			return nil, err
		}
		return remoteSchedules{c}, nil
	}
	e, err := a.open(ctx, weft.Config{}, how)
	if err != nil {
		return nil, err
	}
	return localSchedules{localBackend{dbEngine: e, a: a}}, nil
}

// findSchedule resolves NAME or NAMESPACE/WORKFLOW/NAME.
func findSchedule(ctx context.Context, b scheduleBackend, ref string) (wire.Schedule, error) {
	f, err := store.ParseScheduleRef(ref)
	if err != nil {
		return wire.Schedule{}, usageErrorf("%v", err)
	}
	list, err := b.Schedules(ctx, f)
	if err != nil {
		return wire.Schedule{}, err
	}
	s, err := store.PickSchedule(ref, list)
	if errors.Is(err, store.ErrInvalid) {
		return s, usageErrorf("%v", err)
	}
	if errors.Is(err, store.ErrNotFound) {
		return s, fmt.Errorf("schedule %s: not found", ref)
	}
	return s, err
}

func (a *app) schedulesCommand() *cobra.Command {
	var (
		f       weft.ScheduleFilter
		jsonOut bool
	)
	cmd := &cobra.Command{
		Use:   "schedules",
		Short: "List cron schedules with their last and next ticks; pause and resume them",
		Long: `List the schedules of registered workflows: their cron expression and time
zone, catch-up policy, whether they are paused, the last tick that submitted a
task and the next tick due. Schedules come from the schedules: section of
workflow templates (weft register FILE). A schedule is named
NAMESPACE/WORKFLOW/NAME, or by its NAME alone when no other workflow has a
schedule of that name.`,
		Example: `  weft schedules
  weft schedules pause nightly --reason "quarter close"
  weft schedules resume ops/report/nightly
  weft schedules show nightly`,
		Args: cobra.NoArgs,
		RunE: action(func(cmd *cobra.Command, _ []string) error {
			var err error
			if f.Namespace, f.Workflow, err = workflowFlag(f.Namespace, f.Workflow); err != nil {
				return err
			}
			b, err := a.schedules(cmd.Context(), readOnlyDB)
			if err != nil {
				return err
			}
			defer b.Close()
			list, err := b.Schedules(cmd.Context(), f)
			if err != nil {
				return fmt.Errorf("list schedules: %w", err)
			}
			return writeList(a, list, jsonOut, "no schedules (register a template with a schedules: section)", cliview.Schedules)
		}),
	}
	cmd.Flags().StringVar(&f.Namespace, "namespace", "", "only schedules of this namespace")
	cmd.Flags().StringVar(&f.Workflow, "workflow", "", "only schedules of this workflow: NAMESPACE/NAME, or NAME")
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print the schedules as a JSON array")
	cmd.AddCommand(a.schedulePauseCommand(true), a.schedulePauseCommand(false), a.scheduleShowCommand())
	return cmd
}

func (a *app) schedulePauseCommand(pause bool) *cobra.Command {
	var reason string
	use, short, long, done := "pause NAME", "Stop a schedule from firing until it is resumed",
		`Pause a schedule: it submits no task until resumed. The schedule's audit records
who paused it (cli:<OS user>, or api:<key name> through --server) and --reason.`, "paused"
	if !pause {
		use, short, long, done = "resume NAME", "Let a paused schedule fire again",
			`Resume a paused schedule from its next tick after now: ticks that passed while it
was paused are not caught up. The schedule's audit records who resumed it and
--reason.`, "resumed"
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Long:  long,
		Args:  cobra.ExactArgs(1),
		RunE: action(func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			b, err := a.schedules(ctx, existingDB)
			if err != nil {
				return err
			}
			defer b.Close()
			s, err := findSchedule(ctx, b, args[0])
			if err != nil {
				return err
			}
			s, err = b.Pause(ctx, s.ScheduleKey, pause, reason)
			if err != nil {
				return fmt.Errorf("schedule %s: %w", s.ScheduleKey, err)
			}
			if pause {
				fmt.Fprintf(a.stdout, "schedule %s %s\n", s.ScheduleKey, done)
			} else {
				fmt.Fprintf(a.stdout, "schedule %s %s: next tick %s\n", s.ScheduleKey, done, cliview.Time(&s.NextTick))
			}
			return nil
		}),
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded in the schedule's audit")
	return cmd
}

func (a *app) scheduleShowCommand() *cobra.Command {
	var jsonOut bool
	cmd := &cobra.Command{
		Use:   "show NAME",
		Short: "Show a schedule with its pauses and resumptions",
		Args:  cobra.ExactArgs(1),
		RunE: action(func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			b, err := a.schedules(ctx, readOnlyDB)
			if err != nil {
				return err
			}
			defer b.Close()
			s, err := findSchedule(ctx, b, args[0])
			if err != nil {
				return err
			}
			audit, err := b.ScheduleAudit(ctx, s.ScheduleKey)
			if err != nil {
				return fmt.Errorf("audit of schedule %s: %w", s.ScheduleKey, err)
			}
			if audit == nil {
				audit = []wire.ScheduleAuditEntry{}
			}
			if jsonOut {
				return writeJSON(a.stdout, struct {
					wire.Schedule
					Audit []wire.ScheduleAuditEntry `json:"audit"`
				}{s, audit})
			}
			return cliview.Schedule(a.stdout, s, audit)
		}),
	}
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print the schedule and its audit as JSON")
	return cmd
}
