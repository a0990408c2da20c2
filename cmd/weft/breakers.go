package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/wire"
)

// The circuit breaker commands: 'weft policies' lists the breakers; 'weft
// breaker reset' closes one. Like the other policy commands they work on the
// database (--db) or through a server (--server).

func (l localPolicies) resetBreaker(ctx context.Context, key, reason string) (wire.Breaker, error) {
	b, err := l.Engine.ResetBreaker(ctx, key, weft.Operator{Actor: cliActor(), Reason: reason})
	return wire.BreakerOf(b), err
}

func (r remotePolicies) resetBreaker(ctx context.Context, key, reason string) (wire.Breaker, error) {
	b, err := r.Client.ResetBreaker(ctx, key, reason)
	if err != nil {
		return b, fmt.Errorf("on %s: %w", r.Where(), err)
	}
	return b, nil
}

func (a *app) breakerCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "breaker",
		Short: "Reset the circuit breaker of a step",
		Long: `A step with a circuit_breaker in its template stops being claimed after that
many consecutive failed attempts (across tasks) until its cooldown passes; then
one probe decides whether the breaker closes. 'weft policies' lists the
breakers with their state; 'weft breaker reset' closes one at once.`,
	}
	cmd.AddCommand(a.breakerResetCommand())
	return cmd
}

func (a *app) breakerResetCommand() *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "reset NAMESPACE/WORKFLOW/STEP",
		Short: "Close a circuit breaker and forget its count: its held steps run again",
		Long: `Close the circuit breaker of a step (NAMESPACE/WORKFLOW/STEP, as 'weft
policies' lists it) and forget its count of failures: the steps it held are
claimed again at once, by every engine and remote worker. The reset is
recorded with who made it (cli:<OS user>, or api:<key name> through --server)
and --reason; 'weft policies --history' lists it.`,
		Example: `  weft breaker reset shop/checkout/charge --reason "provider back up"`,
		Args:    cobra.ExactArgs(1),
		RunE: action(func(cmd *cobra.Command, args []string) error {
			b, err := a.policyBackend(cmd.Context(), existingDB)
			if err != nil {
				return err
			}
			defer b.Close()
			if _, err := b.resetBreaker(cmd.Context(), args[0], reason); err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "reset breaker %s: closed; its steps are claimed again\n", args[0])
			return nil
		}),
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded with the change")
	return cmd
}
