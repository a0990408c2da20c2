package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

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
			}
			if jsonOut {
				if list == nil {
					list = []wire.Worker{}
				}
				return writeJSON(a.stdout, list)
			}
			if len(list) == 0 {
				fmt.Fprintln(a.stderr, "no live engines or workers")
				return nil
			}
			tw := newTable(a.stdout)
			fmt.Fprintln(tw, "ID\tKIND\tHOST\tHANDLERS\tHELD\tHEARTBEAT")
			now := time.Now()
			for _, w := range list {
				kind := w.Kind
				if w.Leader {
					kind += " (leader)"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s ago\n", w.ID, kind, w.Host, abbrev(orDash(strings.Join(w.Handlers, ",")), 60), w.Held,
					fmtDuration(now.Sub(w.HeartbeatAt).Round(time.Second)))
			}
			return flushTable(tw)
		}),
	}
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print a JSON array")
	return cmd
}
