package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/internal/builtin"
	"github.com/weftrun/weft/internal/config"
	"github.com/weftrun/weft/internal/telemetry"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/weftdb"
)

// Exit statuses.
const (
	exitOK          = 0
	exitFailed      = 1   // a task failed, or the command could not be done
	exitUsage       = 2   // bad flags or arguments, invalid templates or input
	exitInterrupted = 130 // `weft run` stopped by SIGINT or SIGTERM
)

// exitError ends a command with an exit status. A nil err means the
// command already said what went wrong.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// usageErrorf reports bad flags, arguments or input: exit status 2.
func usageErrorf(format string, args ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, args...)}
}

// flagError is a usage error about a flag's value, from a check shared with
// the API (a store.FieldError names the problem), else err itself.
func flagError(flag string, err error) error {
	var fe *store.FieldError
	if errors.As(err, &fe) {
		return usageErrorf("%s: %s", flag, fe.Problem)
	}
	return usageErrorf("%s: %v", flag, err)
}

// fieldFlag is the flag of a field: the field's own name with dashes
// ("on_conflict": --on-conflict), but for those named otherwise.
func fieldFlag(field string) string {
	switch field {
	case "tags":
		return "--tag"
	case "idempotency_key":
		return "--key"
	}
	return "--" + strings.ReplaceAll(field, "_", "-")
}

// invalidError is the usage error (exit status 2) for err, an ErrInvalid
// from what cmd was given, whether the engine or a server found it: one
// about a field (a store.FieldError) names the argument the command takes
// it as (argField), else its flag, else, where cmd has no such flag, the
// field itself, never a flag the command lacks.
func invalidError(cmd *cobra.Command, err error) error {
	var fe *store.FieldError
	if !errors.As(err, &fe) {
		return &exitError{code: exitUsage, err: err}
	}
	// A filter's fields and a retention's states are flags of their own
	// ("filter.state": --state, "keep.completed": --completed).
	field := strings.TrimPrefix(strings.TrimPrefix(fe.Field, "filter."), "keep.")
	// A value's path inside the flag's JSON is said after the flag
	// ("result.a": --result: a: …).
	var inside string
	if i := strings.IndexAny(field, ".["); i > 0 {
		field, inside = field[:i], strings.TrimPrefix(field[i:], ".")
	}
	name := fieldFlag(field)
	if arg, ok := cmd.Annotations[argField+field]; ok {
		name = arg
	} else if cmd.Flag(strings.TrimPrefix(name, "--")) == nil {
		name = strings.ReplaceAll(field, "_", " ")
	}
	if inside != "" {
		return usageErrorf("%s: %s: %s", name, inside, fe.Problem)
	}
	if !strings.HasPrefix(name, "--") {
		// An argument or a field: its problem names the value given.
		return usageErrorf("%s %s", name, fe.Problem)
	}
	return flagError(name, fe)
}

// exitWith ends the command with code and no further message.
func exitWith(code int) error { return &exitError{code: code} }

// app is one invocation of the CLI: its streams, environment and global
// flags.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string

	dbFlag     string
	logLevel   string
	logFormat  string
	configFlag string
	secretsDir string
	// config is the effective configuration (config.go).
	config *config.Layers
	// serverFlag and tokenFlag make the task commands talk to a server.
	serverFlag string
	tokenFlag  string

	logOut *holdWriter
	log    *slog.Logger
	// notices, with --log-format json, writes the lines an operator must
	// see whatever the level (notice); nil writes them as text.
	notices *slog.Logger
	// tracing holds the tracer provider built from OTEL_*; nil when off.
	tracing *telemetry.Tracing

	// refresh is how often `weft run` redraws its progress.
	refresh time.Duration
	// signals follows SIGINT and SIGTERM (signals.go); nil when the
	// command runs without them (tests).
	signals *signals
}

func newApp(stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) *app {
	return &app{
		stdin: stdin, stdout: stdout, stderr: stderr, getenv: getenv,
		logOut:  &holdWriter{w: stderr},
		log:     slog.New(slog.DiscardHandler),
		refresh: 100 * time.Millisecond,
	}
}

// execute runs the command line and returns the exit status, printing the
// error, if any, on stderr.
func (a *app) execute(ctx context.Context, args []string) int {
	root := a.rootCommand()
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	a.tracing.Shutdown()
	if err == nil {
		return exitOK
	}
	var xe *exitError
	if errors.As(err, &xe) {
		if xe.err != nil {
			a.notice(slog.LevelError, xe.err.Error(), "exit_status", xe.code)
		}
		return xe.code
	}
	// Errors cobra found while parsing: unknown commands and flags, wrong
	// argument counts.
	if a.notices != nil {
		a.notice(slog.LevelError, strings.TrimRight(err.Error(), "\n"), "exit_status", exitUsage, "help", cmd.CommandPath()+" --help")
		return exitUsage
	}
	fmt.Fprintf(a.stderr, "weft: %v\nRun '%s --help' for usage.\n", strings.TrimRight(err.Error(), "\n"), cmd.CommandPath())
	return exitUsage
}

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "weft",
		Short: "Run and inspect durable workflows",
		Long: `weft runs workflows: DAGs of steps described in YAML templates, persisted in a
database so that they survive crashes.

The database is chosen by --db, else $WEFT_DB, else ./weft.db.`,
		Version:           weft.Version,
		SilenceErrors:     true,
		SilenceUsage:      true,
		CompletionOptions: cobra.CompletionOptions{HiddenDefaultCmd: true},
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := a.loadConfig(cmd); err != nil {
				return err
			}
			if err := a.refuseServer(cmd); err != nil {
				return err
			}
			if err := a.setupLogging(cmd); err != nil {
				return err
			}
			ctx, tracing, err := telemetry.Setup(cmd.Context(), a.config, weft.Version, a.logOut, a.log)
			if _, ok := errors.AsType[*telemetry.SettingError](err); ok {
				return &exitError{code: exitUsage, err: err}
			}
			if err != nil {
				return err
			}
			a.tracing = tracing
			cmd.SetContext(ctx)
			return nil
		},
	}
	root.SetIn(a.stdin)
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	root.PersistentFlags().StringVar(&a.dbFlag, "db", "", "database URL or SQLite file path (default $WEFT_DB, else "+weftdb.DefaultDB+")")
	root.PersistentFlags().StringVar(&a.serverFlag, "server", "", "talk to this weft server instead of a database (default $WEFT_SERVER); commands that work on a database only refuse it")
	root.PersistentFlags().StringVar(&a.tokenFlag, "token", "", "API key or JWT for --server (default $WEFT_TOKEN)")
	root.PersistentFlags().StringVar(&a.logLevel, "log-level", "", "log level on stderr: debug, info, warn or error (default warn; info for worker)")
	root.PersistentFlags().StringVar(&a.logFormat, "log-format", "text", "log format on stderr: text (logfmt) or json (one object a line)")
	root.PersistentFlags().StringVar(&a.configFlag, "config", "", "configuration file (default $WEFT_CONFIG, else ./weft.yaml if it exists)")
	root.PersistentFlags().StringVar(&a.secretsDir, "secrets-dir", "", "directory of secret files for ${secret:NAME} in workflow steps (after $WEFT_SECRET_NAME)")
	root.AddCommand(
		a.runCommand(),
		a.submitCommand(),
		a.workerCommand(),
		a.tasksCommand(),
		a.taskCommand(),
		a.stepCommand(),
		a.eventsCommand(),
		a.webhooksCommand(),
		a.cancelCommand(),
		a.retryCommand(),
		a.deleteCommand(),
		a.pruneCommand(),
		a.retentionCommand(),
		a.workersCommand(),
		a.oplogCommand(),
		a.signalCommand(),
		a.validateCommand(),
		a.migrateCommand(),
		a.serveCommand(),
		a.uiCommand(),
		a.keysCommand(),
		a.registerCommand(),
		a.schedulesCommand(),
		a.pauseCommand(), a.resumeCommand(), a.limitCommand(), a.policiesCommand(), a.breakerCommand(),
		a.configCommand(),
		a.versionCommand(),
	)
	return root
}

func (a *app) migrateCommand() *cobra.Command {
	return localOnlyCommand(&cobra.Command{
		Use:   "migrate",
		Short: "Create or upgrade weft's tables in the database",
		Long: `Bring the database's schema up to date and exit. Engines and commands also do
this when they open a database (under an advisory lock on PostgreSQL, so
concurrent starts are safe); migrate does it on its own, for deployments that
upgrade the schema before starting workers.`,
		Args: cobra.NoArgs,
		RunE: action(func(cmd *cobra.Command, _ []string) error {
			e, err := a.open(cmd.Context(), weft.Config{}, createDB)
			if err != nil {
				return err
			}
			a.closeEngine(e)
			fmt.Fprintln(a.stdout, "schema up to date")
			return nil
		}),
	}, "it changes the database's schema; run it where the database is reachable")
}

// argField marks a field that a command takes as an argument, not a flag:
// the annotation argField+FIELD says the argument ("signal name"), which
// a usage error about the field names (invalidError).
const argField = "weft.arg."

// localOnly marks a command that works on a database only: its
// annotation says why, and the command refuses a configured server rather
// than silently opening a local database.
const localOnly = "weft.local-only"

// localOnlyCommand annotates cmd as local-only, for the reason given.
func localOnlyCommand(cmd *cobra.Command, why string) *cobra.Command {
	if cmd.Annotations == nil {
		cmd.Annotations = map[string]string{}
	}
	cmd.Annotations[localOnly] = why
	return cmd
}

// refuseServer refuses a local-only command (or a subcommand of one) when
// a server is configured. serve and worker run an engine of their own and
// refuse only an explicit --server: $WEFT_SERVER names the server that the
// client commands of the same shell talk to.
func (a *app) refuseServer(cmd *cobra.Command) error {
	for c := cmd; c != nil; c = c.Parent() {
		why, ok := c.Annotations[localOnly]
		if !ok {
			continue
		}
		// The server comes from --server, $WEFT_SERVER or the
		// configuration file (config.go): the flag is a request to refuse,
		// the other two are ambient, and serve and worker ignore them.
		source := a.config.Source("server")
		switch {
		case strings.HasPrefix(source, "flag "):
			return usageErrorf("'%s' works on a database only and cannot go through --server: %s; drop --server and give --db", cmd.CommandPath(), why)
		case source == "env WEFT_SERVER" && c.Name() != "serve" && c.Name() != "worker":
			return usageErrorf("'%s' works on a database only and cannot go through $WEFT_SERVER (%s): %s; unset WEFT_SERVER and give --db", cmd.CommandPath(), weftdb.Redact(a.getenv("WEFT_SERVER")), why)
		case source != "" && c.Name() != "serve" && c.Name() != "worker":
			return usageErrorf("'%s' works on a database only and cannot go through the server set in %s (%s): %s; remove it there or give --db", cmd.CommandPath(), source, weftdb.Redact(a.config.Show("server", a.serverURL())), why)
		}
		return nil
	}
	// A command that goes through the server never opens a database: a
	// --db given with it names a second place, which would be ignored.
	if a.serverURL() != "" && strings.HasPrefix(a.config.Source("db"), "flag ") {
		return usageErrorf("'%s' goes through the server given by %s, so it would not open the database that --db names: give one of the two", cmd.CommandPath(), a.config.Describe("server"))
	}
	return nil
}

// action adapts a command body: an error that does not carry an exit
// status exits with 1.
func action(f func(cmd *cobra.Command, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		err := f(cmd, args)
		var xe *exitError
		switch {
		case err == nil || errors.As(err, &xe):
			return err
		case errors.Is(err, store.ErrInvalid):
			// What the command was given is not valid: a usage error
			// naming its argument or flag.
			return invalidError(cmd, err)
		}
		return &exitError{code: exitFailed, err: err}
	}
}

// dbURL returns the database the command works on.
func (a *app) dbURL() string {
	if a.dbFlag != "" {
		return a.dbFlag
	}
	if v := a.getenv("WEFT_DB"); v != "" {
		return v
	}
	return weftdb.DefaultDB
}

// access says how a command uses the database.
type access int

const (
	// createDB creates the database (a SQLite file) if it does not exist.
	createDB access = iota
	// createSaidDB is createDB for commands that change what a database
	// in use holds (its keys, its policies), and says when it creates
	// one: more likely a mistyped --db than a first step.
	createSaidDB
	// existingDB refuses a SQLite file that does not exist, so that
	// acting from the wrong directory does not leave an empty database
	// behind.
	existingDB
	// readOnlyDB is existingDB for commands that only read: the file is
	// opened read-only, so it may sit on media the process cannot write.
	readOnlyDB
)

// dbEngine is an engine on a database the command opened: closing it
// stops the engine and closes the database.
type dbEngine struct {
	*weft.Engine
	db io.Closer
}

// open opens an engine on the database without starting it.
func (a *app) open(ctx context.Context, cfg weft.Config, how access) (*dbEngine, error) {
	url := a.dbURL()
	created := "" // a SQLite file this open creates
	// A URL that names no SQLite file is left for Open to report.
	if path, err := weftdb.SQLitePath(url); err == nil {
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			switch how {
			case createDB:
			case createSaidDB:
				created = path
			default:
				return nil, fmt.Errorf("no database at %s (choose one with --db or WEFT_DB)", a.config.Show("db", path))
			}
		}
	}
	if cfg.StaleAfter == 0 && a.config != nil {
		// Commands without the flag (tasks --attention, ui) judge
		// attention as the engines do.
		if v := a.config.Env("WEFT_STALE_AFTER"); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return nil, usageErrorf("engine.stale_after (%s): want a positive duration such as 5m, got %q", a.config.Source("engine.stale_after"), a.config.Show("engine.stale_after", v))
			}
			cfg.StaleAfter = d
		}
	}
	cfg.Logger = a.log
	cfg.TracerProvider = a.tracing.Provider()
	cfg.Secrets = builtin.EnvSecrets(a.getenv, a.secretsDir, a.config.Show("secrets-dir", a.secretsDir))
	db, err := weftdb.Open(ctx, url, weftdb.Options{ReadOnly: how == readOnlyDB, Logger: a.log})
	if err != nil {
		return nil, err // weftdb names the database and what failed
	}
	e, err := weft.New(db, cfg)
	if err != nil {
		db.Close()
		return nil, err
	}
	if created != "" {
		// Said, so that a mistyped --db is seen at once.
		a.notice(slog.LevelWarn, "created a new, empty database at "+a.config.Show("db", created)+" (check --db if you meant another)", "db", created)
	}
	return &dbEngine{Engine: e, db: db}, nil
}

// closeEngine stops an engine and closes its store, logging a failure.
func (a *app) closeEngine(e *dbEngine) {
	if err := errors.Join(e.Stop(context.Background()), e.db.Close()); err != nil {
		a.log.Error("close engine", "error", err)
	}
}

// maxInputBytes caps a task input read by --input (text, @FILE or stdin):
// 16 MiB, so that a wrong file (or /dev/zero) fails at once instead of
// exhausting memory. A server takes at most --max-body (1 MiB by default)
// anyway.
const maxInputBytes = 16 << 20

// readInput returns the JSON of an --input flag: the text itself, "-" for
// stdin or "@FILE" for a file's content, at most maxInputBytes. "" means no
// input, which Submit reads as {}.
func (a *app) readInput(v string) (json.RawMessage, error) {
	var data []byte
	switch {
	case v == "":
		return nil, nil
	case v == "-":
		b, err := readCapped(a.stdin, "stdin")
		if err != nil {
			return nil, err
		}
		data = b
	case strings.HasPrefix(v, "@"):
		f, err := os.Open(v[1:])
		if err != nil {
			return nil, usageErrorf("--input: %w", err)
		}
		defer f.Close()
		if fi, err := f.Stat(); err == nil && fi.IsDir() {
			return nil, usageErrorf("--input: %s is a directory: name a file of JSON", v[1:])
		}
		b, err := readCapped(f, v[1:])
		if err != nil {
			return nil, err
		}
		data = b
	default:
		data = []byte(v)
	}
	var x any
	if err := json.Unmarshal(data, &x); err != nil {
		return nil, usageErrorf("--input: not valid JSON: %v", err)
	}
	return bytes.TrimSpace(data), nil
}

// readCapped reads r to its end, refusing more than maxInputBytes.
func readCapped(r io.Reader, name string) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxInputBytes+1))
	if err != nil {
		return nil, fmt.Errorf("--input: read %s: %w", name, err)
	}
	if len(b) > maxInputBytes {
		return nil, usageErrorf("--input: %s is larger than %d MiB, the most a task input may be", name, maxInputBytes>>20)
	}
	return b, nil
}

// parseID reads a task id argument.
func parseID(s string) (int64, error) { return parseIDOf("task", s) }

// parseIDOf parses the id of a what ("task", "step").
func parseIDOf(what, s string) (int64, error) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id < 1 {
		return 0, usageErrorf("invalid %s id %q: must be a positive integer", what, s)
	}
	return id, nil
}

// notFound is the message for a task that does not exist.
func notFound(id int64) error { return fmt.Errorf("task %d: not found", id) }

// writeJSON writes v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	if r := reflect.ValueOf(v); r.Kind() == reflect.Slice && r.IsNil() {
		v = []any{} // a list is an array, never null, however it was made
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("write JSON: %w", err)
	}
	return nil
}

// writeList writes a list: as a JSON array (never null) with --json, else
// in its text view, or the message none on stderr when it is empty.
func writeList[T any](a *app, list []T, jsonOut bool, none string, view func(io.Writer, []T) error) error {
	if jsonOut {
		return writeJSON(a.stdout, list)
	}
	if len(list) == 0 {
		fmt.Fprintln(a.stderr, none)
		return nil
	}
	return view(a.stdout, list)
}

// terminal reports whether w is a terminal and its size.
func terminal(w io.Writer) (width, height int, ok bool) {
	f, isFile := w.(*os.File)
	if !isFile || !term.IsTerminal(int(f.Fd())) {
		return 0, 0, false
	}
	width, height, err := term.GetSize(int(f.Fd()))
	if err != nil {
		return 80, 0, true
	}
	return width, height, true
}
