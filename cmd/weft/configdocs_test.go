package main

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/weftdb"
)

// backticked returns the `code` spans of s.
func backticked(s string) []string {
	var out []string
	for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(s, -1) {
		out = append(out, m[1])
	}
	return out
}

// docTable returns the rows of the Markdown table of doc whose header
// line starts with header, as cells.
func docTable(t *testing.T, doc, header string) [][]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", doc))
	require.NoError(t, err)
	lines := strings.Split(string(b), "\n")
	for i, l := range lines {
		if !strings.HasPrefix(l, header) {
			continue
		}
		var rows [][]string
		for _, row := range lines[i+2:] {
			if !strings.HasPrefix(row, "|") {
				return rows
			}
			rows = append(rows, strings.Split(strings.Trim(row, "|"), "|"))
		}
		return rows
	}
	t.Fatalf("no table %q in %s", header, doc)
	return nil
}

// TestConfigDocsMatchSettings: the settings table of docs/configuration.md
// lists every setting with its key, flag and environment variable, and
// nothing else.
func TestConfigDocsMatchSettings(t *testing.T) {
	t.Parallel()
	type doc struct{ flag, env string }
	documented := map[string]doc{}
	for _, row := range docTable(t, "configuration.md", "| key | flag | environment |") {
		require.Len(t, row, 3, "%q", row)
		var keys []string
		for _, k := range backticked(row[0]) {
			if strings.HasPrefix(k, ".") { // `.audience` after `serve.jwt.issuer`
				prev := keys[len(keys)-1]
				k = prev[:strings.LastIndex(prev, ".")] + k
			}
			keys = append(keys, k)
		}
		var flags, envs []string
		for _, f := range backticked(row[1]) {
			flags = append(flags, strings.TrimPrefix(f, "--"))
		}
		for _, e := range backticked(row[2]) {
			if regexp.MustCompile(`^[A-Z][A-Z0-9_]*$`).MatchString(e) { // not the examples such as `cpu=80,io=50`
				envs = append(envs, e)
			}
		}
		require.Len(t, envs, len(keys), "row %q: one variable per key", row)
		require.Contains(t, []int{0, len(keys)}, len(flags), "row %q: one flag per key, or none", row)
		for i, k := range keys {
			d := doc{env: envs[i]}
			if len(flags) > 0 {
				d.flag = flags[i]
			}
			documented[k] = d
		}
	}
	inTable := map[string]doc{}
	for _, s := range settings {
		inTable[s.Key] = doc{flag: s.Flag, env: s.Env}
	}
	require.Equal(t, inTable, documented, "docs/configuration.md's settings table and the settings of config.go")
}

// TestConfigDefaultsAreApplied: the default "weft config" prints for each
// setting is the default of its flag on every command it applies to, and
// the engine's settings default to what weft.Config applies.
func TestConfigDefaultsAreApplied(t *testing.T) {
	t.Parallel()
	r := weftIn(t.Context(), "", "config")
	requireCode(t, 0, r)
	root := newApp(nil, nil, nil, func(string) string { return "" }).rootCommand()
	printed := map[string]string{}
	for _, s := range settings {
		value, source := configLine(t, r.stdout, s.Key)
		require.Equal(t, "default", source)
		printed[s.Key] = value
		if s.Flag == "" || s.Key == "log.level" { // log.level: a default per command, printed as a sentence
			continue
		}
		found := 0
		for _, cmd := range root.Commands() {
			f := cmd.Flags().Lookup(s.Flag)
			if f == nil {
				f = cmd.InheritedFlags().Lookup(s.Flag)
			}
			if f == nil || !s.AppliesTo(cmd.Name()) {
				continue
			}
			found++
			want := flagDefault(f)
			if s.Key == "db" {
				want = weftdb.DefaultDB // the flag's "" means $WEFT_DB, else this
			}
			if want == "" {
				want = "(unset)"
			}
			require.Equal(t, want, value, "%s: the default of %s --%s", s.Key, cmd.Name(), s.Flag)
		}
		require.NotZero(t, found, "%s: no command has --%s", s.Key, s.Flag)
	}
	for key, want := range map[string]string{
		"engine.concurrency":        strconv.Itoa(weft.DefaultConcurrency),
		"engine.drain":              weft.DefaultShutdownTimeout.String(),
		"engine.lease_ttl":          weft.DefaultLeaseTTL.String(),
		"engine.heartbeat_interval": weft.DefaultHeartbeatInterval.String(),
		"engine.stale_after":        weft.DefaultStaleAfter.String(),
	} {
		require.Equal(t, want, printed[key], "%s: what weft.Config applies", key)
	}
}

// TestConfigDocsNameRealFields: every Go field the docs name as
// weft.Config's or weftdb.Options's exists there, and the Configuration
// table's flags and defaults are the CLI's.
func TestConfigDocsNameRealFields(t *testing.T) {
	t.Parallel()
	types := map[string]reflect.Type{
		"weft.Config":    reflect.TypeFor[weft.Config](),
		"Config":         reflect.TypeFor[weft.Config](),
		"weftdb.Options": reflect.TypeFor[weftdb.Options](),
	}
	docs, err := filepath.Glob(filepath.Join("..", "..", "docs", "*.md"))
	require.NoError(t, err)
	docs = append(docs, filepath.Join("..", "..", "README.md"))
	re := regexp.MustCompile("`((?:weft\\.)?Config|weftdb\\.Options)\\.([A-Z][A-Za-z]*)")
	named := 0
	for _, path := range docs {
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			_, ok := types[m[1]].FieldByName(m[2])
			require.True(t, ok, "%s names %s.%s, which does not exist", path, m[1], m[2])
			named++
		}
	}
	require.NotZero(t, named)

	r := weftIn(t.Context(), "", "config")
	requireCode(t, 0, r)
	byFlag := map[string]string{}
	for _, s := range settings {
		if s.Flag != "" {
			byFlag[s.Flag], _ = configLine(t, r.stdout, s.Key)
		}
	}
	for _, row := range docTable(t, "configuration.md", "| `weft.Config` field | CLI | default | meaning |") {
		require.Len(t, row, 4, "%q", row)
		for _, field := range backticked(row[0]) {
			_, ok := reflect.TypeFor[weft.Config]().FieldByName(field)
			require.True(t, ok, "docs/configuration.md lists weft.Config.%s, which does not exist", field)
		}
		flags := backticked(row[1])
		if len(flags) == 0 {
			continue
		}
		require.Len(t, flags, 1, "%q", row)
		value, ok := byFlag[strings.TrimPrefix(flags[0], "--")]
		require.True(t, ok, "docs/configuration.md lists %s, which no setting has", flags[0])
		documented := strings.TrimSpace(row[2])
		if documented == "none" {
			require.Equal(t, "(unset)", value, flags[0])
			continue
		}
		if d, err := time.ParseDuration(strings.ReplaceAll(documented, " ", "")); err == nil {
			got, err := time.ParseDuration(value)
			require.NoError(t, err, flags[0])
			require.Equal(t, d, got, "docs/configuration.md: the default of %s", flags[0])
			continue
		}
		require.Equal(t, documented, value, "docs/configuration.md: the default of %s", flags[0])
	}
}

// TestConfigAppliesToItsCommands: a setting sets the flag of the commands
// it is for, not a flag of the same name elsewhere: weft.yaml's
// engine.concurrency is not 'weft limit --concurrency'.
func TestConfigAppliesToItsCommands(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "weft.db")
	registerWorkflows(t, db, "shop")
	file := writeFile(t, dir, "weft.yaml", "engine:\n  concurrency: 16\nserve:\n  addr: 0.0.0.0:9\n")
	r := weftCLI(t, "--config", file, "--db", db, "limit", "shop", "--rate", "5/s")
	requireCode(t, 0, r)
	require.NotContains(t, r.stdout, "16", "the engine's concurrency is no namespace limit")
	r = weftCLI(t, "--config", file, "--db", db, "policies", "--json")
	requireCode(t, 0, r)
	require.NotContains(t, r.stdout, `"concurrency"`)
	r = weftCLI(t, "--config", file, "--db", db, "ui", "--addr", "nowhere")
	requireCode(t, 2, r)
	require.Contains(t, r.stderr, `--addr "nowhere"`, "serve.addr is not weft ui's")
}

// TestConfigRemovedCaps: engine.caps, which the docs once listed, is
// refused wherever it is still set, naming what replaced it.
func TestConfigRemovedCaps(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := writeFile(t, dir, "weft.yaml", "engine:\n  concurrency: 4\n  caps: {billing: 4}\n")
	for _, args := range [][]string{{"config"}, {"worker"}, {"tasks"}} {
		r := weftCLI(t, append([]string{"--config", file, "--db", filepath.Join(dir, "weft.db")}, args...)...)
		requireCode(t, exitUsage, r)
		require.Contains(t, r.stderr, file+":3: engine.caps was removed")
		require.Contains(t, r.stderr, "weft limit NAMESPACE --concurrency N")
	}
	env := map[string]string{"WEFT_CAPS": "billing=4", "WEFT_DB": filepath.Join(dir, "env.db")}
	var stdout, stderr syncBuffer
	code := newApp(strings.NewReader(""), &stdout, &stderr, func(k string) string { return env[k] }).execute(t.Context(), []string{"worker"})
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr.String(), "WEFT_CAPS was removed")
	require.Contains(t, stderr.String(), "weft limit NAMESPACE --concurrency N")
}
