package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/internal/cliview"
)

func (a *app) webhooksCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "webhooks",
		Short: "Manage webhooks: POST every lifecycle event to a URL",
		Long: `A webhook POSTs the lifecycle events it selects (the same events as
'weft events') to a URL, one request per event, in order, signed with an
HMAC-SHA256 of its secret in the Weft-Signature header. The engine that holds
the maintenance lease delivers them: at least once each, retrying with backoff
while the receiver fails (no answer, 408, 429, 5xx) and disabling the webhook
when it refuses an event for good (any other status) until it is enabled
again, from that event. See docs/api.md for the signature's format.`,
	}
	cmd.AddCommand(a.webhooksCreateCommand(), a.webhooksListCommand(), a.webhooksIDCommand("delete", "Delete a webhook"),
		a.webhooksIDCommand("enable", "Enable a disabled webhook: it delivers again from the event it stopped at"))
	return cmd
}

func (a *app) webhooksCreateCommand() *cobra.Command {
	var spec weft.WebhookSpec
	var types string
	cmd := &cobra.Command{
		Use:   "create --url URL",
		Short: "Create a webhook and print its secret (shown this once)",
		Example: `  weft webhooks create --url https://ops.example/weft --namespace shop --types task.failed,step.failed
  weft webhooks create --url https://ops.example/all --server http://weft:8080`,
		Args: cobra.NoArgs,
		RunE: action(func(cmd *cobra.Command, _ []string) error {
			if types != "" {
				spec.Types = strings.Split(types, ",")
			}
			ctx := cmd.Context()
			b, err := a.backend(ctx, existingDB)
			if err != nil {
				return err
			}
			defer b.Close()
			w, err := b.AddWebhook(ctx, spec)
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stderr, "webhook %d created; its secret (shown only now) signs every delivery:\n", w.ID)
			fmt.Fprintln(a.stdout, w.Secret)
			return nil
		}),
	}
	fl := cmd.Flags()
	fl.StringVar(&spec.URL, "url", "", "where the events are POSTed (http:// or https://)")
	fl.StringVar(&spec.Namespace, "namespace", "", "only events of this namespace")
	fl.StringVar(&spec.Workflow, "workflow", "", "only events of this workflow: NAMESPACE/NAME, or NAME")
	fl.StringVar(&types, "types", "", "comma-separated event types (default all): "+strings.Join(weft.EventTypes, ","))
	_ = cmd.MarkFlagRequired("url")
	return cmd
}

func (a *app) webhooksListCommand() *cobra.Command {
	var jsonOut bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List webhooks with their state and last error (never their secrets)",
		Args:  cobra.NoArgs,
		RunE: action(func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			b, err := a.backend(ctx, readOnlyDB)
			if err != nil {
				return err
			}
			defer b.Close()
			ws, err := b.ListWebhooks(ctx)
			if err != nil {
				return err
			}
			return writeList(a, ws, jsonOut, "no webhooks", cliview.Webhooks)
		}),
	}
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print a JSON array")
	return cmd
}

// webhooksIDCommand is delete or enable.
func (a *app) webhooksIDCommand(verb, short string) *cobra.Command {
	return &cobra.Command{
		Use:   verb + " ID",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: action(func(cmd *cobra.Command, args []string) error {
			id, err := strconv.ParseInt(args[0], 10, 64)
			if err != nil || id < 1 {
				return usageErrorf("invalid webhook id %q: must be a positive integer", args[0])
			}
			ctx := cmd.Context()
			b, err := a.backend(ctx, existingDB)
			if err != nil {
				return err
			}
			defer b.Close()
			do := b.RemoveWebhook
			if verb == "enable" {
				do = b.ResumeWebhook
			}
			err = do(ctx, id)
			if errors.Is(err, weft.ErrNotFound) {
				return fmt.Errorf("webhook %d: not found", id)
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "webhook %d %sed\n", id, strings.TrimSuffix(verb, "e"))
			return nil
		}),
	}
}
