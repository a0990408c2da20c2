package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/weftrun/weft/internal/builtin"
	"github.com/weftrun/weft/internal/config"
	"github.com/weftrun/weft/weftdb"
)

// This file layers the CLI's settings: defaults < the configuration file
// (weft.yaml in the working directory, --config FILE or $WEFT_CONFIG) <
// the environment (WEFT_*, and the standard OTEL_* for telemetry) < flags.
// Each setting has one key in the file, one environment variable and, for
// most, one flag; "weft config" prints what is in effect and where each
// value came from.

// setting is one configurable value of the CLI.
type setting struct {
	key    string // in the configuration file
	flag   string // the flag that sets it; "" for settings read from the environment only
	env    string // the environment variable that sets it
	kind   config.Kind
	secret bool // shown redacted
	// commands are the commands whose flag the setting sets; nil: every
	// command that has the flag (the global flags). Another command may
	// have a flag of the same name that means something else ('weft
	// limit --concurrency').
	commands []string
}

// The commands the settings of a section apply to.
var (
	engineCommands = []string{"worker", "serve", "run"}
	serveCommands  = []string{"serve"}
	workerCommands = []string{"worker"}
)

// settings lists every setting, in the order "weft config" prints them.
var settings = []setting{
	{key: "db", flag: "db", env: "WEFT_DB"},
	{key: "server", flag: "server", env: "WEFT_SERVER"},
	{key: "token", flag: "token", env: "WEFT_TOKEN", secret: true},
	{key: "log.level", flag: "log-level", env: "WEFT_LOG_LEVEL"},
	{key: "log.format", flag: "log-format", env: "WEFT_LOG_FORMAT"},
	{key: "secrets.dir", flag: "secrets-dir", env: "WEFT_SECRETS_DIR"},
	{key: "engine.concurrency", flag: "concurrency", env: "WEFT_CONCURRENCY", commands: engineCommands},
	{key: "engine.drain", flag: "drain", env: "WEFT_DRAIN", commands: engineCommands},
	{key: "engine.max_pressure", flag: "max-pressure", env: "WEFT_MAX_PRESSURE", kind: config.Map, commands: engineCommands},
	{key: "engine.lease_ttl", flag: "lease-ttl", env: "WEFT_LEASE_TTL", commands: engineCommands},
	{key: "engine.heartbeat_interval", flag: "heartbeat-interval", env: "WEFT_HEARTBEAT_INTERVAL", commands: engineCommands},
	{key: "engine.stale_after", flag: "stale-after", env: "WEFT_STALE_AFTER", commands: engineCommands},
	{key: "worker.metrics_addr", flag: "metrics-addr", env: "WEFT_METRICS_ADDR", commands: workerCommands},
	{key: "serve.addr", flag: "addr", env: "WEFT_ADDR", commands: serveCommands},
	{key: "serve.insecure_no_auth", flag: "insecure-no-auth", env: "WEFT_INSECURE_NO_AUTH", commands: serveCommands},
	{key: "serve.max_body", flag: "max-body", env: "WEFT_MAX_BODY", commands: serveCommands},
	{key: "serve.max_backlog", flag: "max-backlog", env: "WEFT_MAX_BACKLOG", commands: serveCommands},
	{key: "serve.request_timeout", flag: "request-timeout", env: "WEFT_REQUEST_TIMEOUT", commands: serveCommands},
	{key: "serve.max_poll", flag: "max-poll", env: "WEFT_MAX_POLL", commands: serveCommands},
	{key: "serve.jwt.issuer", flag: "jwt-issuer", env: "WEFT_JWT_ISSUER", commands: serveCommands},
	{key: "serve.jwt.audience", flag: "jwt-audience", env: "WEFT_JWT_AUDIENCE", commands: serveCommands},
	{key: "serve.jwt.public_key", flag: "jwt-public-key", env: "WEFT_JWT_PUBLIC_KEY", commands: serveCommands},
	{key: "serve.jwt.jwks_url", flag: "jwt-jwks-url", env: "WEFT_JWT_JWKS_URL", commands: serveCommands},
	{key: "telemetry.traces_exporter", env: "OTEL_TRACES_EXPORTER"},
	{key: "telemetry.otlp_endpoint", env: "OTEL_EXPORTER_OTLP_ENDPOINT"},
	{key: "telemetry.otlp_headers", env: "OTEL_EXPORTER_OTLP_HEADERS", secret: true},
	{key: "telemetry.service_name", env: "OTEL_SERVICE_NAME"},
	{key: "telemetry.sampler", env: "OTEL_TRACES_SAMPLER"},
	{key: "telemetry.sampler_arg", env: "OTEL_TRACES_SAMPLER_ARG"},
}

// appliesTo reports whether the setting sets the flag of the command
// named name.
func (s setting) appliesTo(name string) bool {
	return s.commands == nil || slices.Contains(s.commands, name)
}

// removedSettings are keys the configuration file no longer takes, with
// what replaced each: a file that still has one is refused with that.
var removedSettings = map[string]string{
	"engine.caps": "namespace limits are held in the database for every engine: set one with 'weft limit NAMESPACE --concurrency N'",
}

// defaultConfigFile is read from the working directory when it exists and
// neither --config nor $WEFT_CONFIG names another.
const defaultConfigFile = "weft.yaml"

// resolved is a setting's effective value and where it came from.
type resolved struct {
	setting
	items    []string // nil: not set (the default applies)
	source   string   // "default", "flag --x", "env X" or "FILE:LINE"
	fromFile bool     // made by a ${file:} interpolation
}

// configuration is what the CLI resolved of its settings.
type configuration struct {
	file     string // the configuration file read, "" for none
	settings []resolved
	byEnv    map[string]*resolved
	getenv   func(string) string
}

// Env returns the value the environment or the file gives the setting of
// environment variable name, and for a variable that is no setting, the
// environment's: what the OTEL_* variables are read through.
func (c *configuration) Env(name string) string {
	r, ok := c.byEnv[name]
	switch {
	case !ok:
		return c.getenv(name)
	case len(r.items) > 0:
		return strings.Join(r.items, ",")
	}
	return ""
}

// source returns where the setting of key came from: "flag --x", "env
// X", "FILE:LINE", or "" when nothing set it.
func (c *configuration) source(key string) string {
	for _, r := range c.settings {
		if r.key == key && r.items != nil {
			return r.source
		}
	}
	return ""
}

// describe names the flag for an error about its value: "--flag", with
// the setting and where it came from when that was not the command line
// ("--lease-ttl (engine.lease_ttl at weft.yaml:4)"). c may be nil.
func (c *configuration) describe(flag string) string {
	if c == nil {
		return "--" + flag
	}
	for _, r := range c.settings {
		if r.flag != flag || r.items == nil || strings.HasPrefix(r.source, "flag ") {
			continue
		}
		if strings.HasPrefix(r.source, "env ") {
			return fmt.Sprintf("--%s (%s, from %s)", flag, r.key, r.source)
		}
		return fmt.Sprintf("--%s (%s at %s)", flag, r.key, r.source)
	}
	return "--" + flag
}

// FromFile reports whether the setting of environment variable name came
// from the configuration file rather than the environment.
func (c *configuration) FromFile(name string) bool {
	r := c.byEnv[name]
	return r != nil && len(r.items) > 0 && !strings.HasPrefix(r.source, "env ")
}

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
	schema := map[string]config.Kind{}
	for _, s := range settings {
		schema[s.key] = s.kind
	}
	for key := range removedSettings {
		schema[key] = config.Map // read, to be refused with what replaced it
	}
	file := map[string]config.Value{}
	c := &configuration{byEnv: map[string]*resolved{}, getenv: a.getenv}
	switch v, err := config.Load(path, schema, a.getenv); {
	case err == nil:
		file, c.file = v, path
	case errors.Is(err, os.ErrNotExist) && !explicit:
	case errors.Is(err, os.ErrNotExist):
		return usageErrorf("configuration file %s does not exist", path)
	default:
		return usageErrorf("%v", err)
	}
	for key, instead := range removedSettings {
		if v, ok := file[key]; ok {
			return usageErrorf("%s: %s was removed: %s", v.Where(), key, instead)
		}
	}
	fs := cmd.Flags()
	c.settings = make([]resolved, len(settings))
	for i, s := range settings {
		r := &c.settings[i]
		r.setting, r.source = s, "default"
		var f *pflag.Flag
		if s.flag != "" && s.appliesTo(cmd.Name()) {
			f = fs.Lookup(s.flag)
		}
		switch v, inFile := file[s.key]; {
		case f != nil && f.Changed:
			r.source = "flag --" + s.flag
			r.items = flagItems(f)
		case a.getenv(s.env) != "":
			r.source, r.items = "env "+s.env, []string{a.getenv(s.env)}
		case inFile:
			r.source, r.items, r.fromFile = v.Where(), v.Items, v.FromFile
		}
		c.byEnv[s.env] = r
		if f == nil || f.Changed || r.items == nil {
			continue
		}
		for _, item := range r.items {
			if err := fs.Set(s.flag, item); err != nil {
				return usageErrorf("%s (%s): %v", s.key, r.source, err)
			}
		}
	}
	a.config = c
	return nil
}

// flagItems returns a flag's value as items.
func flagItems(f *pflag.Flag) []string {
	if sv, ok := f.Value.(pflag.SliceValue); ok {
		return sv.GetSlice()
	}
	return []string{f.Value.String()}
}

// secretLookup resolves the secrets built-in steps name: from
// WEFT_SECRET_<NAME>, else from the file NAME in the secrets directory.
func (a *app) secretLookup(ctx context.Context, name string) (string, error) {
	if v := a.getenv(builtin.SecretEnvPrefix + name); v != "" {
		return v, nil
	}
	if a.secretsDir == "" {
		return "", fmt.Errorf("not found: set %s%s in the engine's environment or use --secrets-dir", builtin.SecretEnvPrefix, name)
	}
	// The name is letters, digits and _ (checked by the caller): it stays
	// in the directory.
	f, err := os.Open(filepath.Join(a.secretsDir, name))
	if errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("not found: no %s%s in the engine's environment and no file %s in %s", builtin.SecretEnvPrefix, name, name, a.secretsDir)
	}
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 64<<10+1))
	if err != nil {
		return "", fmt.Errorf("read %s: %w", f.Name(), err)
	}
	if len(b) > 64<<10 {
		return "", fmt.Errorf("%s is larger than 64 KiB", f.Name())
	}
	return strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r"), nil
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
	if c.file != "" {
		fmt.Fprintf(w, "# configuration file: %s\n", c.file)
	} else {
		fmt.Fprintln(w, "# configuration file: none")
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	defaults := a.defaults()
	for _, r := range c.settings {
		value := strings.Join(r.items, ",")
		switch {
		case r.items == nil:
			value = defaults[r.key]
		case r.secret || r.fromFile:
			value = "[redacted]"
		case r.key == "db":
			value = weftdb.Redact(value)
		case r.kind == config.Map || r.kind == config.List:
			sorted := append([]string(nil), r.items...)
			sort.Strings(sorted)
			value = strings.Join(sorted, ",")
		}
		if value == "" {
			value = "(unset)"
		}
		fmt.Fprintf(tw, "%s\t%s\t# %s\n", r.key, value, r.source)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write configuration: %w", err)
	}
	return nil
}

// defaults returns the default of every setting that has a flag, as the
// commands the setting applies to declare it: the defaults they apply.
func (a *app) defaults() map[string]string {
	out := map[string]string{}
	// A fresh app: declaring flags sets their variables to the defaults.
	root := newApp(nil, io.Discard, io.Discard, a.getenv).rootCommand()
	for _, s := range settings {
		if s.flag == "" {
			continue
		}
		for _, cmd := range append([]*cobra.Command{root}, root.Commands()...) {
			if cmd != root && !s.appliesTo(cmd.Name()) {
				continue
			}
			f := cmd.Flags().Lookup(s.flag)
			if f == nil {
				f = cmd.PersistentFlags().Lookup(s.flag)
			}
			if f != nil {
				out[s.key] = flagDefault(f)
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
