package main

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/internal/cliview"
	"github.com/weftrun/weft/wire"
)

func (a *app) workersCommand() *cobra.Command {
	var jsonOut bool
	cmd := &cobra.Command{
		Use:   "workers",
		Short: "List the live engines and remote workers, their handlers, held steps and last heartbeat",
		Long: `List the engines and remote workers that are live on the database: the handlers
each serves (* means any), how many steps it holds now, and when it last
heartbeated. A ready step whose handler none of them serves appears in
'weft tasks --attention' once it has waited longer than the engines'
StaleAfter (5m by default).`,
		Example: `  weft workers
  weft workers --json | jq '.[] | select(.kind == "remote")'`,
		Args: cobra.NoArgs,
		RunE: action(func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			b, err := a.backend(ctx, readOnlyDB)
			if err != nil {
				return err
			}
			defer b.Close()
			var list []wire.Worker
			switch be := b.(type) {
			case localBackend:
				ws, err := be.ListWorkers(ctx)
				if err != nil {
					return err
				}
				for _, w := range ws {
					kind := "engine"
					if w.Worker {
						kind = "remote"
					}
					h := w.Handlers
					if h == nil {
						h = []string{}
					}
					list = append(list, wire.Worker{ID: w.ID, Kind: kind, Host: w.Host, PID: w.PID, Leader: w.Leader, Handlers: h,
						Held: w.Held, StartedAt: w.StartedAt, HeartbeatAt: w.HeartbeatAt})
				}
			case remoteBackend:
				if list, err = be.Workers(ctx); err != nil {
					return err
				}
			default:
				return fmt.Errorf("internal error: unknown backend %T", b)
			}
			return writeList(a, list, jsonOut, "no live engines or workers", func(w io.Writer, list []wire.Worker) error {
				return cliview.Workers(w, list, time.Now())
			})
		}),
	}
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print a JSON array")
	return cmd
}

func (a *app) oplogCommand() *cobra.Command {
	var (
		limit   int
		jsonOut bool
	)
	cmd := &cobra.Command{
		Use:   "oplog",
		Short: "Show the operator log: deleted tasks and changes of retention, newest first",
		Long: `Show the operator log: the operator actions whose subject keeps no audit trail
of its own, newest first: each task deleted (weft delete, weft prune), with who
deleted it and why, and each change of a namespace's retention. Deletions by
retention are counted, not logged (see docs/monitoring.md).`,
		Example: `  weft oplog --limit 20`,
		Args:    cobra.NoArgs,
		RunE: action(func(cmd *cobra.Command, _ []string) error {
			if limit < 1 || limit > 1000 {
				return usageErrorf("--limit must be from 1 to 1000, got %d", limit)
			}
			ctx := cmd.Context()
			b, err := a.backend(ctx, readOnlyDB)
			if err != nil {
				return err
			}
			defer b.Close()
			var entries []wire.OperatorEntry
			switch be := b.(type) {
			case localBackend:
				var log []weft.OperatorEntry
				log, err = be.OperatorLog(ctx, limit)
				entries = wire.List(log, wire.OperatorEntryOf)
			case remoteBackend:
				entries, err = be.Client.OperatorLog(ctx, limit)
			default:
				return fmt.Errorf("internal error: unknown backend %T", b)
			}
			if err != nil {
				return err
			}
			return writeList(a, entries, jsonOut, "the operator log is empty", cliview.OperatorLog)
		}),
	}
	cmd.Flags().IntVar(&limit, "limit", 50, "at most this many entries")
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print a JSON array")
	return cmd
}
