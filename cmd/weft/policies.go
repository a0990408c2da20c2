package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/internal/cliview"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/wire"
)

// The scheduling policy commands: pause, resume, limit and policies. They
// work on the database (--db) or through a server (--server), like the
// task commands.

// policyBackend is what the policy commands need: a local engine on the
// database or a server's API.
type policyBackend interface {
	changePolicy(ctx context.Context, ch wire.PolicyChange) (wire.Policy, error)
	policies(ctx context.Context) (wire.PolicyReport, error)
	policyChanges(ctx context.Context, limit int) ([]wire.PolicyChangeRecord, error)
	resetBreaker(ctx context.Context, key, reason string) (wire.Breaker, error)
	Where() string
	Close()
}

type localPolicies struct{ localBackend }

func (l localPolicies) changePolicy(ctx context.Context, ch wire.PolicyChange) (wire.Policy, error) {
	op := weft.Operator{Actor: cliActor(), Reason: ch.Reason}
	var p weft.Policy
	var err error
	if ch.Concurrency != nil || ch.Weight != nil || ch.Rate != nil {
		limits := weft.Limits{Concurrency: ch.Concurrency, Weight: ch.Weight}
		if ch.Rate != nil {
			rate, err := weft.ParseRate(*ch.Rate)
			if err != nil {
				return wire.Policy{}, err
			}
			limits.Rate = &rate
		}
		if p, err = l.Engine.SetLimits(ctx, ch.Target, limits, op); err != nil {
			return wire.Policy{}, err
		}
	}
	switch {
	case ch.Paused != nil && *ch.Paused:
		p, err = l.Engine.Pause(ctx, ch.Target, op)
	case ch.Paused != nil:
		p, err = l.Engine.Resume(ctx, ch.Target, op)
	}
	return wire.PolicyOf(p), err
}

func (l localPolicies) policies(ctx context.Context) (wire.PolicyReport, error) {
	rep, err := l.Engine.Policies(ctx)
	return wire.PolicyReportOf(rep), err
}

func (l localPolicies) policyChanges(ctx context.Context, limit int) ([]wire.PolicyChangeRecord, error) {
	changes, err := l.Engine.PolicyChanges(ctx, limit)
	return wire.List(changes, wire.PolicyChangeRecordOf), err
}

type remotePolicies struct{ remoteBackend }

func (r remotePolicies) changePolicy(ctx context.Context, ch wire.PolicyChange) (wire.Policy, error) {
	p, err := r.Client.ChangePolicy(ctx, ch)
	if err != nil {
		return p, fmt.Errorf("on %s: %w", r.Where(), err)
	}
	return p, nil
}

func (r remotePolicies) policies(ctx context.Context) (wire.PolicyReport, error) {
	p, err := r.Client.Policies(ctx)
	if err != nil {
		return p, fmt.Errorf("on %s: %w", r.Where(), err)
	}
	return p, nil
}

func (r remotePolicies) policyChanges(ctx context.Context, limit int) ([]wire.PolicyChangeRecord, error) {
	c, err := r.Client.PolicyChanges(ctx, limit)
	if err != nil {
		return nil, fmt.Errorf("on %s: %w", r.Where(), err)
	}
	return c, nil
}

// policyBackend opens the database, or a client of the server when one is
// configured. A change creates a SQLite file that does not exist yet: a
// pause or a limit set before the first task is submitted is meant.
func (a *app) policyBackend(ctx context.Context, how access) (policyBackend, error) {
	if url := a.serverURL(); url != "" {
		c, err := a.serverClient()
		if err != nil {
			return nil, err
		}
		return remotePolicies{remoteBackend{Client: c, url: url}}, nil
	}
	e, err := a.open(ctx, weft.Config{}, how)
	if err != nil {
		return nil, err
	}
	return localPolicies{localBackend{dbEngine: e, a: a}}, nil
}

// pauseTarget reads TARGET or --all.
func pauseTarget(args []string, all bool) (string, error) {
	switch {
	case all && len(args) > 0:
		return "", usageErrorf("give a TARGET or --all, not both")
	case all:
		return weft.AllTargets, nil
	case len(args) == 0:
		return "", usageErrorf("give a TARGET (NAMESPACE or NAMESPACE/WORKFLOW) or --all")
	case args[0] == weft.AllTargets:
		return "", usageErrorf("use --all for all work")
	}
	return args[0], nil
}

func (a *app) pauseCommand() *cobra.Command { return a.pauseResumeCommand(true) }

func (a *app) resumeCommand() *cobra.Command { return a.pauseResumeCommand(false) }

func (a *app) pauseResumeCommand(pause bool) *cobra.Command {
	var (
		all    bool
		reason string
	)
	verb, short, long := "resume", "Let a paused namespace, workflow or all work be claimed again",
		`Resume a target paused with 'weft pause': engines and remote workers claim its
ready steps again at once. The change is recorded with who made it (cli:<OS
user>, or api:<key name> through --server) and --reason.`
	if pause {
		verb, short, long = "pause", "Stop claiming the steps of a namespace, a workflow or all work",
			`Pause a namespace (shop), a workflow (shop/checkout) or, with --all, all work.
Tasks are still submitted, but no engine or remote worker on the database
claims their steps until 'weft resume'; steps already running finish. The pause
is held in the database, so it holds for every engine and survives restarts.
The change is recorded with who made it (cli:<OS user>, or api:<key name>
through --server) and --reason; 'weft policies' lists what is paused.`
	}
	cmd := &cobra.Command{
		Use:   verb + " TARGET|--all",
		Short: short,
		Long:  long,
		Example: fmt.Sprintf(`  weft %[1]s shop --reason "payment provider down"
  weft %[1]s shop/checkout
  weft %[1]s --all`, verb),
		Args: cobra.MaximumNArgs(1),
		RunE: action(func(cmd *cobra.Command, args []string) error {
			target, err := pauseTarget(args, all)
			if err != nil {
				return err
			}
			b, err := a.policyBackend(cmd.Context(), createSaidDB)
			if err != nil {
				return err
			}
			defer b.Close()
			if _, err := b.changePolicy(cmd.Context(), wire.PolicyChange{Target: target, Paused: &pause, Reason: reason}); err != nil {
				return err
			}
			name := target
			if target == weft.AllTargets {
				name = "all work"
			}
			if pause {
				fmt.Fprintf(a.stdout, "paused %s: its steps are not claimed until 'weft resume' (running steps finish)\n", name)
			} else {
				fmt.Fprintf(a.stdout, "resumed %s\n", name)
			}
			return nil
		}),
	}
	cmd.Flags().BoolVar(&all, "all", false, verb+" all work")
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded with the change")
	return cmd
}

func (a *app) limitCommand() *cobra.Command {
	var (
		concurrency, weight int
		rate, reason        string
	)
	cmd := &cobra.Command{
		Use: "limit NAMESPACE [--concurrency N] [--rate LIMIT/PER] [--weight W]",
		// A namespace the engine or the server refuses is said as NAMESPACE.
		Annotations: map[string]string{argField + "target": "namespace"},
		Short:       "Set the limits, rate and weight of a namespace, held in the database for every engine",
		Long: `Set how many steps of a namespace run at once across every engine and remote
worker on the database (--concurrency N; 0 removes the limit), how often they
are claimed (--rate LIMIT/PER), and its weight in the fair shares (--weight W,
1 to 1000; 0 or 1 sets the default of 1 back).

--rate LIMIT/PER bounds how often steps of the namespace are claimed across
every engine and remote worker: at most LIMIT per PER (s, m, h or a duration
such as 10s), in bursts of up to LIMIT, counted by a token bucket held in the
database; --rate 0 or off removes it. A step that finds no token is not run
and uses no attempt: it waits until a token will exist.

While several namespaces have ready work and slots are scarce, claims are
shared between them in proportion to their weights, counted over the steps
running on every engine: with shop at weight 3 and others at 1, shop gets three
slots for each one of another namespace. Priority and aging still order the
steps inside a namespace; a namespace without ready work leaves its share to
the others.

All are held in the database: they change at once, without restarting
anything, and the limit and the rate are exact under concurrent claims. Steps
running above a lowered limit finish. Limits of one step or one workflow are
set in its template (concurrency: {limit: N, key: ...}, rate_limit: {limit: N,
per: 1s, key: ...}). The change is recorded with who made it and --reason.`,
		Example: `  weft limit shop --concurrency 4
  weft limit shop --concurrency 0   # no limit
  weft limit shop --rate 50/s
  weft limit shop --rate 1000/h --concurrency 8
  weft limit shop --rate off        # no rate
  weft limit shop --weight 3        # three times the share of a namespace at 1
  weft limit shop --weight 1        # the default weight again`,
		Args: cobra.ExactArgs(1),
		RunE: action(func(cmd *cobra.Command, args []string) error {
			ch := wire.PolicyChange{Target: args[0], Reason: reason}
			if cmd.Flags().Changed("concurrency") {
				if err := store.CheckConcurrency(concurrency); err != nil {
					return flagError("--concurrency", err)
				}
				ch.Concurrency = &concurrency
			}
			if cmd.Flags().Changed("rate") {
				if _, err := weft.ParseRate(rate); err != nil {
					return flagError("--rate", err)
				}
				ch.Rate = &rate
			}
			if cmd.Flags().Changed("weight") {
				if err := store.CheckWeight(weight); err != nil {
					return flagError("--weight", err)
				}
				ch.Weight = &weight
			}
			if ch.Concurrency == nil && ch.Rate == nil && ch.Weight == nil {
				return usageErrorf("give --concurrency N (0 removes the limit), --rate LIMIT/PER (0 or off removes it), --weight W (1 is the default) or several")
			}
			b, err := a.policyBackend(cmd.Context(), createSaidDB)
			if err != nil {
				return err
			}
			defer b.Close()
			p, err := b.changePolicy(cmd.Context(), ch)
			if err != nil {
				return err
			}
			cliview.Limits(a.stdout, ch, p)
			return nil
		}),
	}
	cmd.Flags().IntVar(&concurrency, "concurrency", 0, "steps of the namespace running at once across all engines; 0: no limit")
	cmd.Flags().StringVar(&rate, "rate", "", "claims of the namespace's steps per period across all engines: LIMIT/PER (50/s, 100/m, 1000/h, 5/10s); 0 or off: no rate")
	cmd.Flags().IntVar(&weight, "weight", 0, "share of the claims while namespaces compete for slots, 1 to 1000; 0 or 1: the default of 1")
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded with the change")
	return cmd
}

func (a *app) policiesCommand() *cobra.Command {
	var (
		jsonOut, history bool
		limit            int
	)
	cmd := &cobra.Command{
		Use:   "policies",
		Short: "List what is paused and every limit, with current usage",
		Long: `List the scheduling policies held in the database: paused targets, namespace
limits and weights with the steps running now, then the concurrency limits that
workflow templates define, for each key with work running, then the rates in
force (namespaces' and, for each key used, templates') with the tokens their
buckets hold now. --history lists the changes instead, newest first, with who
made them.`,
		Example: `  weft policies
  weft policies --history --limit 20
  weft policies --json | jq '.policies[] | select(.paused)'`,
		Args: cobra.NoArgs,
		RunE: action(func(cmd *cobra.Command, _ []string) error {
			if limit < 1 || limit > 1000 {
				return usageErrorf("--limit must be from 1 to 1000, got %d", limit)
			}
			b, err := a.policyBackend(cmd.Context(), existingDB)
			if err != nil {
				return err
			}
			defer b.Close()
			if history {
				changes, err := b.policyChanges(cmd.Context(), limit)
				if err != nil {
					return err
				}
				return writeList(a, changes, jsonOut, "no policy changes", cliview.PolicyChanges)
			}
			rep, err := b.policies(cmd.Context())
			if err != nil {
				return err
			}
			if jsonOut {
				return writeJSON(a.stdout, rep)
			}
			return cliview.Policies(a.stdout, rep)
		}),
	}
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print JSON")
	cmd.Flags().BoolVar(&history, "history", false, "list the changes of policies, newest first")
	cmd.Flags().IntVar(&limit, "limit", 100, "with --history: at most this many changes")
	return cmd
}
