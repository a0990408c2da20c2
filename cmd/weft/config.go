package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/weftrun/weft/internal/config"
	"github.com/weftrun/weft/weftdb"
)

// This file lists the CLI's settings, which internal/config layers:
// defaults < the configuration file (weft.yaml in the working directory,
// --config FILE or $WEFT_CONFIG) < the environment (WEFT_*, and the
// standard OTEL_* for telemetry) < flags.
// Each setting has one key in the file, one environment variable and, for
// most, one flag; "weft config" prints what is in effect and where each
// value came from.

// The commands the settings of a section apply to.
var (
	engineCommands = []string{"worker", "serve", "run"}
	serveCommands  = []string{"serve"}
	workerCommands = []string{"worker"}
)

// settings lists every setting, in the order "weft config" prints them.
var settings = []config.Setting{
	{Key: "db", Flag: "db", Env: "WEFT_DB"},
	{Key: "server", Flag: "server", Env: "WEFT_SERVER"},
	{Key: "token", Flag: "token", Env: "WEFT_TOKEN", Secret: true},
	{Key: "log.level", Flag: "log-level", Env: "WEFT_LOG_LEVEL"},
	{Key: "log.format", Flag: "log-format", Env: "WEFT_LOG_FORMAT"},
	{Key: "secrets.dir", Flag: "secrets-dir", Env: "WEFT_SECRETS_DIR"},
	{Key: "engine.concurrency", Flag: "concurrency", Env: "WEFT_CONCURRENCY", Commands: engineCommands},
	{Key: "engine.namespaces", Flag: "namespaces", Env: "WEFT_NAMESPACES", Kind: config.List, Commands: engineCommands},
	{Key: "engine.drain", Flag: "drain", Env: "WEFT_DRAIN", Commands: engineCommands},
	{Key: "engine.max_pressure", Flag: "max-pressure", Env: "WEFT_MAX_PRESSURE", Kind: config.Map, Commands: engineCommands},
	{Key: "engine.lease_ttl", Flag: "lease-ttl", Env: "WEFT_LEASE_TTL", Commands: engineCommands},
	{Key: "engine.heartbeat_interval", Flag: "heartbeat-interval", Env: "WEFT_HEARTBEAT_INTERVAL", Commands: engineCommands},
	{Key: "engine.stale_after", Flag: "stale-after", Env: "WEFT_STALE_AFTER", Commands: engineCommands},
	{Key: "worker.metrics_addr", Flag: "metrics-addr", Env: "WEFT_METRICS_ADDR", Commands: workerCommands},
	{Key: "serve.addr", Flag: "addr", Env: "WEFT_ADDR", Commands: serveCommands},
	{Key: "serve.metrics_addr", Flag: "metrics-addr", Env: "WEFT_SERVE_METRICS_ADDR", Commands: serveCommands},
	{Key: "serve.insecure_no_auth", Flag: "insecure-no-auth", Env: "WEFT_INSECURE_NO_AUTH", Commands: serveCommands},
	{Key: "serve.max_body", Flag: "max-body", Env: "WEFT_MAX_BODY", Commands: serveCommands},
	{Key: "serve.max_backlog", Flag: "max-backlog", Env: "WEFT_MAX_BACKLOG", Commands: serveCommands},
	{Key: "serve.request_timeout", Flag: "request-timeout", Env: "WEFT_REQUEST_TIMEOUT", Commands: serveCommands},
	{Key: "serve.max_poll", Flag: "max-poll", Env: "WEFT_MAX_POLL", Commands: serveCommands},
	{Key: "serve.jwt.issuer", Flag: "jwt-issuer", Env: "WEFT_JWT_ISSUER", Commands: serveCommands},
	{Key: "serve.jwt.audience", Flag: "jwt-audience", Env: "WEFT_JWT_AUDIENCE", Commands: serveCommands},
	{Key: "serve.jwt.public_key", Flag: "jwt-public-key", Env: "WEFT_JWT_PUBLIC_KEY", Commands: serveCommands},
	{Key: "serve.jwt.jwks_url", Flag: "jwt-jwks-url", Env: "WEFT_JWT_JWKS_URL", Commands: serveCommands},
	{Key: "serve.jwt.namespaces_claim", Flag: "jwt-namespaces-claim", Env: "WEFT_JWT_NAMESPACES_CLAIM", Commands: serveCommands},
	{Key: "serve.tls.cert", Flag: "tls-cert", Env: "WEFT_TLS_CERT", Commands: serveCommands},
	{Key: "serve.tls.key", Flag: "tls-key", Env: "WEFT_TLS_KEY", Commands: serveCommands},
	{Key: "serve.trusted_proxies", Flag: "trusted-proxy", Env: "WEFT_TRUSTED_PROXIES", Kind: config.List, Commands: serveCommands},
	{Key: "telemetry.traces_exporter", Env: "OTEL_TRACES_EXPORTER"},
	{Key: "telemetry.otlp_endpoint", Env: "OTEL_EXPORTER_OTLP_ENDPOINT"},
	{Key: "telemetry.otlp_headers", Env: "OTEL_EXPORTER_OTLP_HEADERS", Secret: true},
	{Key: "telemetry.service_name", Env: "OTEL_SERVICE_NAME"},
	{Key: "telemetry.sampler", Env: "OTEL_TRACES_SAMPLER"},
	{Key: "telemetry.sampler_arg", Env: "OTEL_TRACES_SAMPLER_ARG"},
}

// removedSettings are keys the configuration file no longer takes, with
// what replaced each: a file that still has one is refused with that.
var removedSettings = map[string]string{
	"engine.caps": "namespace limits are held in the database for every engine: set one with 'weft limit NAMESPACE --concurrency N'",
}

// defaultConfigFile is read from the working directory when it exists and
// neither --config nor $WEFT_CONFIG names another.
const defaultConfigFile = "weft.yaml"

// configFile returns the configuration file to read: --config, else
// $WEFT_CONFIG, else weft.yaml in the working directory if there is one.
// explicit is false for that last one, which may be absent.
func (a *app) configFile() (path string, explicit bool) {
	switch {
	case a.configFlag != "":
		return a.configFlag, true
	case a.getenv("WEFT_CONFIG") != "":
		return a.getenv("WEFT_CONFIG"), true
	}
	return defaultConfigFile, false
}

// loadConfig resolves every setting and sets the flags of cmd that the
// environment or the file set and the command line did not.
func (a *app) loadConfig(cmd *cobra.Command) error {
	path, explicit := a.configFile()
	c, err := config.Resolve(path, explicit, settings, removedSettings, cmd.Flags(), cmd.Name(), a.getenv)
	if err != nil {
		return usageErrorf("%v", err)
	}
	a.config = c
	return nil
}

func (a *app) configCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "config",
		Short: "Print the effective configuration and where each value comes from",
		Long: `Print every setting of weft with its effective value and its source: a flag,
an environment variable, the configuration file (FILE:LINE) or the default.
Secrets (the token, OTLP headers, values read with ${file:...}) are shown as
[redacted], and a database URL without its password.

Settings are layered: defaults < the configuration file < the environment <
flags. The file is --config FILE, else $WEFT_CONFIG, else weft.yaml in the
working directory if there is one. Flags of other commands shown here take
their values from the file and the environment only.`,
		Args: cobra.NoArgs,
		RunE: action(func(cmd *cobra.Command, _ []string) error {
			return a.printConfig(a.stdout)
		}),
	}
}

// printConfig writes the effective configuration.
func (a *app) printConfig(w io.Writer) error {
	c := a.config
	if c.File != "" {
		fmt.Fprintf(w, "# configuration file: %s\n", c.File)
	} else {
		fmt.Fprintln(w, "# configuration file: none")
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	defaults := a.defaults()
	for _, r := range c.Settings {
		value := strings.Join(r.Items, ",")
		switch {
		case r.Items == nil:
			value = defaults[r.Key]
		case r.Secret || r.FromFile:
			value = "[redacted]"
		case r.Key == "db":
			value = weftdb.Redact(value)
		case r.Kind == config.Map || r.Kind == config.List:
			sorted := append([]string(nil), r.Items...)
			sort.Strings(sorted)
			value = strings.Join(sorted, ",")
		}
		if value == "" {
			value = "(unset)"
		}
		fmt.Fprintf(tw, "%s\t%s\t# %s\n", r.Key, value, r.Source)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write configuration: %w", err)
	}
	if bad := a.invalidSettings(); len(bad) > 0 {
		for _, msg := range bad {
			fmt.Fprintf(a.stderr, "weft: %s\n", msg)
		}
		return exitWith(exitUsage)
	}
	return nil
}

// invalidSettings resolves the settings for every command, as each does
// when it runs, and returns what they refuse: a value the command that
// takes it could not parse. Each is said once.
func (a *app) invalidSettings() []string {
	root := newApp(nil, io.Discard, io.Discard, a.getenv).rootCommand()
	path, explicit := a.configFile()
	seen := map[string]bool{}
	var out []string
	var walk func(*cobra.Command)
	walk = func(cmd *cobra.Command) {
		if cmd.Runnable() {
			_, err := config.Resolve(path, explicit, settings, removedSettings, cmd.Flags(), cmd.Name(), a.getenv)
			if err != nil && !seen[err.Error()] {
				seen[err.Error()] = true
				out = append(out, err.Error())
			}
		}
		for _, sub := range cmd.Commands() {
			walk(sub)
		}
	}
	walk(root)
	return out
}

// defaults returns the default of every setting that has a flag, as the
// commands the setting applies to declare it: the defaults they apply.
func (a *app) defaults() map[string]string {
	out := map[string]string{}
	// A fresh app: declaring flags sets their variables to the defaults.
	root := newApp(nil, io.Discard, io.Discard, a.getenv).rootCommand()
	for _, s := range settings {
		if s.Flag == "" {
			continue
		}
		for _, cmd := range append([]*cobra.Command{root}, root.Commands()...) {
			if cmd != root && !s.AppliesTo(cmd.Name()) {
				continue
			}
			f := cmd.Flags().Lookup(s.Flag)
			if f == nil {
				f = cmd.PersistentFlags().Lookup(s.Flag)
			}
			if f != nil {
				out[s.Key] = flagDefault(f)
				break
			}
		}
	}
	out["db"] = weftdb.DefaultDB
	out["log.level"] = "warn (info for worker and serve)"
	out["telemetry.traces_exporter"] = "none"
	return out
}

// flagDefault is a flag's default as "weft config" prints it.
func flagDefault(f *pflag.Flag) string {
	if sv, ok := f.Value.(pflag.SliceValue); ok && len(sv.GetSlice()) == 0 {
		return ""
	}
	return f.DefValue
}
