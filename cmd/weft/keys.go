package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/internal/cliview"
	"github.com/weftrun/weft/server"
	"github.com/weftrun/weft/wire"
)

func (a *app) keysCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "keys",
		Short: "Manage the API keys of 'weft serve'",
		Long: `Create, list and revoke the API keys that authenticate requests to 'weft serve'.
Keys live in the database (only a hash of each secret is stored), so every
server on the database accepts them.`,
	}
	cmd.AddCommand(a.keysCreateCommand(), a.keysListCommand(), a.keysRevokeCommand())
	return localOnlyCommand(cmd, "keys are managed in the database the server uses, by whoever can reach it")
}

func (a *app) keysCreateCommand() *cobra.Command {
	var name, perms string
	var namespaces []string
	cmd := &cobra.Command{
		Use:   "create --name NAME --permissions LIST [--namespaces LIST]",
		Short: "Create an API key and print its secret, once, on the last line",
		Long: `Create an API key. The key is printed once, on the last line of the output:
store it now, it cannot be shown again.

Permissions are resource:action, comma-separated: ` + strings.Join(server.Permissions, ", ") + `,
or resource:* for every action on a resource. admin:* grants everything.

A permission holds in every namespace, or in those named after '@'
(tasks:read@shop,billing). --namespaces names them for every permission
that names none. A key bound to namespaces finds nothing elsewhere: another
namespace's tasks, workflows and events are not found, lists and the
dashboard show them not, and its workers take no step there.`,
		Example: `  weft keys create --name ci --permissions tasks:create,tasks:read
  weft keys create --name shop-team --permissions 'tasks:*,workflows:read' --namespaces shop
  weft keys create --name audit --permissions 'tasks:read@shop,billing,policies:read'
  token=$(weft keys create --name py-worker --permissions workers:connect --namespaces shop | tail -n1)`,
		Args: cobra.NoArgs,
		RunE: action(func(cmd *cobra.Command, _ []string) error {
			list, err := server.SplitGrants(perms)
			if err != nil {
				return usageErrorf("--permissions: %v", err)
			}
			if list, err = server.ScopeGrants(list, namespaces); err != nil {
				return usageErrorf("--%v", err)
			}
			token, k, err := server.NewAPIKey(name, list)
			if err != nil {
				return usageErrorf("%v", err)
			}
			e, err := a.open(cmd.Context(), weft.Config{}, createSaidDB)
			if err != nil {
				return err
			}
			defer a.closeEngine(e)
			if err := e.APIKeys().CreateAPIKey(cmd.Context(), k); err != nil {
				return fmt.Errorf("create key: %w", err)
			}
			fmt.Fprintf(a.stdout, "created API key %s (%s) with %s\n", k.ID, k.Name, strings.Join(k.Permissions, " "))
			fmt.Fprintln(a.stdout, "the key is shown only now:")
			fmt.Fprintln(a.stdout, token)
			return nil
		}),
	}
	cmd.Flags().StringVar(&name, "name", "", "what the key is for (shown in listings and logs)")
	cmd.Flags().StringVar(&perms, "permissions", "", "comma-separated permissions, each perhaps with its namespaces: tasks:create,tasks:read@shop,billing")
	cmd.Flags().StringSliceVar(&namespaces, "namespaces", nil, "namespaces where the permissions that name none hold (default: every namespace)")
	return cmd
}

func (a *app) keysListCommand() *cobra.Command {
	var jsonOut bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List API keys (never their secrets)",
		Args:  cobra.NoArgs,
		RunE: action(func(cmd *cobra.Command, _ []string) error {
			e, err := a.open(cmd.Context(), weft.Config{}, existingDB)
			if err != nil {
				return err
			}
			defer a.closeEngine(e)
			keys, err := e.APIKeys().ListAPIKeys(cmd.Context())
			if err != nil {
				return fmt.Errorf("list keys: %w", err)
			}
			return writeList(a, wire.List(keys, wire.APIKeyOf), jsonOut, "no keys", cliview.Keys)
		}),
	}
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print a JSON array")
	return cmd
}

func (a *app) keysRevokeCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "revoke ID",
		Short: "Revoke an API key: it authenticates nothing from now on",
		Args:  cobra.ExactArgs(1),
		RunE: action(func(cmd *cobra.Command, args []string) error {
			e, err := a.open(cmd.Context(), weft.Config{}, existingDB)
			if err != nil {
				return err
			}
			defer a.closeEngine(e)
			err = e.APIKeys().RevokeAPIKey(cmd.Context(), args[0])
			if errors.Is(err, weft.ErrNotFound) {
				return fmt.Errorf("no API key %s", args[0])
			}
			if err != nil {
				return fmt.Errorf("revoke key: %w", err)
			}
			fmt.Fprintf(a.stdout, "API key %s revoked\n", args[0])
			return nil
		}),
	}
}
