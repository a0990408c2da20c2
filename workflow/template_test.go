package workflow

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// tplErrorLines returns the lines of err's message after checking that every
// joined error is a *DefinitionError naming file.
func tplErrorLines(t *testing.T, err error, file string) []string {
	t.Helper()
	require.Error(t, err)
	j, ok := err.(interface{ Unwrap() []error })
	require.True(t, ok, "want joined errors, got %T", err)
	for _, e := range j.Unwrap() {
		var de *DefinitionError
		require.True(t, errors.As(e, &de), "want *DefinitionError, got %T: %v", e, e)
		require.Equal(t, file, de.File)
	}
	return strings.Split(err.Error(), "\n")
}

func tplPtr[T any](v T) *T { return &v }

func TestLoadTemplateDiamond(t *testing.T) {
	t.Parallel()
	path := filepath.Join("testdata", "templates", "diamond.yaml")
	w, err := Load(path)
	require.NoError(t, err)

	fixed := RetryPolicy{MaxAttempts: 3, Backoff: "fixed", Initial: Duration(500 * time.Millisecond)}
	shipRetry := fixed
	shipRetry.MaxAttempts = 10
	want := &Workflow{
		Namespace:   "shop",
		Name:        "checkout",
		Version:     "1.0.0",
		Description: "Take an order from cart to shipment.",
		Identity:    IdentityStrict,
		source:      path,
		Steps: []Step{
			{
				Name:    "validate",
				Handler: "shop.validate",
				Config:  json.RawMessage(`{"command":["./validate.sh","--strict"],"env":{"LEVEL":3,"RATIO":0.5,"DEBUG":false,"EXTRA":null},"nested":[{"a":1},[1,2.50,"x & y"]]}`),
				line:    8,
			},
			{
				Name:      "charge",
				Handler:   "shop.charge",
				DependsOn: []string{"validate"},
				Retry: RetryPolicy{
					MaxAttempts: 5, Backoff: "exponential", Initial: Duration(time.Second),
					Max: Duration(time.Minute), Jitter: tplPtr(0.2),
				},
				Timeout:  Duration(30 * time.Second),
				Priority: 5,
				TTL:      Duration(10 * time.Minute),
				line:     16,
			},
			{Name: "reserve", Handler: "shop.reserve", DependsOn: []string{"validate"}, Retry: fixed, Priority: -1, line: 23},
			{Name: "ship", Handler: "shop.ship", DependsOn: []string{"charge", "reserve"}, Retry: shipRetry, line: 32},
		},
	}
	require.Equal(t, want, w)
	require.Equal(t, string(want.Steps[0].Config), string(w.Steps[0].Config), "config must keep key order, integers and number text")
	require.NoError(t, w.Validate())
}

// TestLoadTemplateUnreadable: a template that cannot be read is reported
// as its problems are, "FILE: what went wrong", and keeps the cause.
func TestLoadTemplateUnreadable(t *testing.T) {
	t.Parallel()
	missing := filepath.Join("testdata", "templates", "nope.yaml")
	dir := filepath.Join("testdata", "templates")
	for _, tc := range []struct {
		name, path, want string
		is               error
	}{
		{"missing", missing, missing + ": no such file or directory", fs.ErrNotExist},
		{"a directory", dir, dir + ": is a directory", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Load(tc.path)
			require.EqualError(t, err, tc.want)
			if tc.is != nil {
				require.ErrorIs(t, err, tc.is)
			}
		})
	}
}

func TestParseTemplateVersion(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ yaml, want string }{
		{"1.10", "1.10"},
		{"1", "1"},
		{"1.5", "1.5"},
		{"1.0.0", "1.0.0"},
		{`"2.0.0-rc.1"`, "2.0.0-rc.1"},
		{"0x1F", "0x1F"},
		{"2024-01-02", "2024-01-02"},
	} {
		t.Run(tc.yaml, func(t *testing.T) {
			t.Parallel()
			w, err := Parse("v.yaml", []byte("namespace: n\nname: w\nversion: "+tc.yaml+"\nsteps: [{name: a, handler: h}]\n"))
			require.NoError(t, err)
			require.Equal(t, tc.want, w.Version)
		})
	}
}

func TestParseTemplateConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, config, want string }{
		{"scalars", `{i: 42, neg: -7, big: 9007199254740993, f: 1.0, e: 1e3, t: true, n: null, s: "a<b>&c"}`,
			`{"i":42,"neg":-7,"big":9007199254740993,"f":1.0,"e":1e3,"t":true,"n":null,"s":"a<b>&c"}`},
		{"yaml-only number forms", `{hex: 0x1F, under: 1_000, dot: .5, plus: +3}`, `{"hex":31,"under":1000,"dot":0.5,"plus":3}`},
		{"nested", `{a: [1, [2, {b: ~}]], c: {}}`, `{"a":[1,[2,{"b":null}]],"c":{}}`},
		{"strings that look like other things", `{v: "1.10", y: yes, d: 2024-01-02}`, `{"v":"1.10","y":"yes","d":"2024-01-02"}`},
		{"anchors and merges", `{base: &b {x: 1, y: 2}, copy: *b, over: {<<: *b, y: 3}}`,
			`{"base":{"x":1,"y":2},"copy":{"x":1,"y":2},"over":{"y":3,"x":1}}`},
		{"empty", `{}`, `{}`},
		{"explicit tags", `{a: !!str 12, b: !!float 3, c: !custom text, d: !!binary aGk=}`, `{"a":"12","b":3,"c":"text","d":"aGk="}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w, err := Parse("c.yaml", []byte("namespace: n\nname: w\nversion: 1\nsteps:\n  - name: a\n    handler: h\n    config: "+tc.config+"\n"))
			require.NoError(t, err)
			require.Equal(t, tc.want, string(w.Steps[0].Config))
			require.True(t, json.Valid(w.Steps[0].Config))
		})
	}
}

// tplHeader is a valid start of a template: errors in the cases below start on
// line 4.
const tplHeader = "namespace: shop\nname: checkout\nversion: 1.0.0\n"

func TestParseTemplateErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, yaml string
		want       []string
	}{
		{
			name: "unknown top-level key",
			yaml: tplHeader + "owner: me\nsteps: [{name: a, handler: h}]\n",
			want: []string{`checkout.yaml:4: unknown key "owner"`},
		},
		{
			name: "unknown step key",
			yaml: tplHeader + "steps:\n  - name: validate\n    handler: shop.validate\n  - name: charge\n    handler: shop.charge\n    retrys: 3\n",
			want: []string{`checkout.yaml:9: step "charge": unknown key "retrys"`},
		},
		{
			name: "unknown retry key, step named later",
			yaml: tplHeader + "steps:\n  - retry:\n      attempts: 3\n    name: a\n    handler: h\n",
			want: []string{`checkout.yaml:6: step "a": retry: unknown key "attempts"`},
		},
		{
			name: "unnamed step",
			yaml: tplHeader + "steps:\n  - handler: h\n    colour: red\n",
			want: []string{
				`checkout.yaml:6: steps[0]: unknown key "colour"`,
				`checkout.yaml:5: name: every step needs a name`,
			},
		},
		{
			name: "string where a list is expected",
			yaml: tplHeader + "steps:\n  - {name: a, handler: h}\n  - name: b\n    handler: h\n    depends_on: a\n",
			want: []string{`checkout.yaml:8: step "b": depends_on: must be a list, got a string "a"`},
		},
		{
			name: "list item of the wrong type",
			yaml: tplHeader + "steps:\n  - {name: a, handler: h, depends_on: [b, {c: d}]}\n  - {name: b, handler: h}\n",
			want: []string{`checkout.yaml:5: step "a": depends_on[1]: must be a string, got a mapping`},
		},
		{
			name: "steps not a list",
			yaml: tplHeader + "steps: {name: a}\n",
			want: []string{`checkout.yaml:4: steps: must be a list, got a mapping`}, // not again as "needs at least one step"
		},
		{
			name: "a limit out of range is said once",
			yaml: tplHeader + "steps:\n  - name: a\n    handler: h\n    concurrency: {limit: 99999999999}\n",
			want: []string{`checkout.yaml:7: step "a": concurrency.limit: must be at most 2147483647, got 99999999999`},
		},
		{
			name: "step not a mapping",
			yaml: tplHeader + "steps:\n  - a\n  - {name: b, handler: h}\n",
			want: []string{`checkout.yaml:5: steps[0]: must be a mapping, got a string "a"`},
		},
		{
			name: "name not a string",
			yaml: "namespace: shop\nname: [a]\nversion: 1\nsteps: [{name: a, handler: h}]\n",
			want: []string{`checkout.yaml:2: name: must be a string, got a list`}, // not again as "is required"
		},
		{
			name: "non-integer max_attempts",
			yaml: tplHeader + "steps:\n  - name: a\n    handler: h\n    retry: {max_attempts: three}\n  - name: b\n    handler: h\n    retry:\n      max_attempts: 2.5\n",
			want: []string{
				`checkout.yaml:7: step "a": retry.max_attempts: must be an integer, got a string "three"`,
				`checkout.yaml:11: step "b": retry.max_attempts: must be an integer, got a number "2.5"`,
			},
		},
		{
			name: "bad durations",
			yaml: tplHeader + "steps:\n  - name: a\n    handler: h\n    timeout: 10 sec\n    ttl: 30\n    retry: {initial: [1s]}\n",
			want: []string{
				`checkout.yaml:7: step "a": timeout: invalid duration "10 sec" (use Go syntax such as 10ms, 30s, 1m, or days such as 7d)`,
				`checkout.yaml:8: step "a": ttl: invalid duration "30" (use Go syntax such as 10ms, 30s, 1m, or days such as 7d)`,
				`checkout.yaml:9: step "a": retry.initial: must be a string, got a list`,
			},
		},
		{
			name: "negative numbers",
			yaml: tplHeader + "steps:\n  - name: a\n    handler: h\n    ttl: -5s\n    priority: -3\n    retry:\n      max_attempts: -2\n      jitter: -0.1\n",
			want: []string{
				`checkout.yaml:7: step "a": ttl: duration "-5s" must not be negative`,
				`checkout.yaml:10: step "a": retry.max_attempts: must be at least 1, got -2`,
				`checkout.yaml:11: step "a": retry.jitter: must be at least 0, got -0.1`,
			},
		},
		{
			name: "enumerations",
			yaml: tplHeader + "identity: loose\nsteps:\n  - {name: a, handler: h, retry: {backoff: random, jitter: yes}}\n",
			want: []string{
				`checkout.yaml:4: identity: "loose" is not one of [unique strict caller]`,
				`checkout.yaml:6: step "a": retry.backoff: "random" is not one of [exponential fixed linear]`,
				`checkout.yaml:6: step "a": retry.jitter: must be a number, got a string "yes"`,
			},
		},
		{
			name: "explicit tags that do not fit",
			yaml: tplHeader + "steps: [{name: a, handler: h, priority: !!int \"\", config: {x: !!int \"\", y: !!bool maybe}}]\n",
			want: []string{
				`checkout.yaml:4: step "a": priority: must be an integer, got an integer ""`,
				`checkout.yaml:4: step "a": config.x: an integer "" cannot be represented in JSON`,
				`checkout.yaml:4: step "a": config.y: a boolean "maybe" cannot be represented in JSON`,
			},
		},
		{
			name: "number above the range",
			yaml: tplHeader + "steps: [{name: a, handler: h, retry: {jitter: 1.5}}]\n",
			want: []string{`checkout.yaml:4: step "a": retry.jitter: must be at most 1, got 1.5`},
		},
		{
			name: "integer out of range",
			yaml: tplHeader + "steps: [{name: a, handler: h, priority: 99999999999999999999}]\n",
			want: []string{`checkout.yaml:4: step "a": priority: must be an integer, got a number "99999999999999999999"`},
		},
		{
			name: "duplicate keys",
			yaml: tplHeader + "name: again\nsteps:\n  - name: a\n    handler: h\n    handler: h2\n    config: {x: 1, x: 2}\n",
			want: []string{
				`checkout.yaml:4: duplicate key "name"`,
				`checkout.yaml:8: step "a": duplicate key "handler"`,
				`checkout.yaml:9: step "a": config: duplicate key "x"`,
			},
		},
		{
			name: "config not a mapping",
			yaml: tplHeader + "steps:\n  - name: a\n    handler: h\n    config: [1, 2]\n",
			want: []string{`checkout.yaml:7: step "a": config: must be a mapping, got a list`},
		},
		{
			name: "config keys and values JSON cannot hold",
			yaml: tplHeader + "steps:\n  - name: a\n    handler: h\n    config:\n      1: one\n      nested: {list: [{? [k]\n : v}]}\n      ok: .inf\n",
			want: []string{
				`checkout.yaml:8: step "a": config: keys must be strings, got an integer "1"`,
				`checkout.yaml:9: step "a": config.nested.list[0]: keys must be strings, got a list`,
				`checkout.yaml:11: step "a": config.ok: a number ".inf" cannot be represented in JSON`,
			},
		},
		{
			name: "alias bomb",
			yaml: tplHeader + "steps:\n  - name: a\n    handler: h\n    config:\n" +
				"      a: &a [x, x, x, x, x, x, x, x, x, x]\n      b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n" +
				"      c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\n      d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n" +
				"      e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\n      f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n",
			want: []string{`checkout.yaml:8: step "a": config.e[7][8][9][0][2]: template expands to more than 100000 nodes through aliases`},
		},
		{
			name: "recursive merge",
			yaml: tplHeader + "steps:\n  - name: a\n    handler: h\n    retry: &r {<<: *r}\n",
			want: []string{`checkout.yaml:7: step "a": retry: template expands to more than 100000 nodes through aliases`},
		},
		{
			name: "merge of a non-mapping",
			yaml: tplHeader + "steps:\n  - name: a\n    handler: h\n    retry: {<<: [1]}\n",
			want: []string{`checkout.yaml:7: step "a": retry.<<: must be a mapping, got an integer "1"`},
		},
		{name: "empty", yaml: "", want: []string{`checkout.yaml: template is empty`}},
		{name: "only comments", yaml: "# nothing here\n", want: []string{`checkout.yaml: template is empty`}},
		{name: "null document", yaml: "---\n~\n", want: []string{`checkout.yaml: template is empty`}},
		{
			name: "multiple documents",
			yaml: tplHeader + "steps: [{name: a, handler: h}]\n---\n" + tplHeader,
			want: []string{`checkout.yaml:5: a template holds one YAML document; put each workflow version in its own file`},
		},
		{
			name: "top level not a mapping",
			yaml: "- namespace: shop\n- name: checkout\n",
			want: []string{`checkout.yaml:1: top level: must be a mapping, got a list`},
		},
		{
			name: "top level scalar",
			yaml: "checkout\n",
			want: []string{`checkout.yaml:1: top level: must be a mapping, got a string "checkout"`},
		},
		{
			name: "invalid YAML",
			yaml: tplHeader + "steps: [\n",
			want: []string{`checkout.yaml:4: invalid YAML: did not find expected node content`},
		},
		{
			name: "cycle",
			yaml: tplHeader + "steps:\n  - {name: a, handler: h, depends_on: [c]}\n  - {name: b, handler: h, depends_on: [a]}\n  - name: c\n    handler: h\n    depends_on: [b]\n",
			want: []string{`checkout.yaml:5: step "a": depends_on: cycle: a -> c -> b -> a`},
		},
		{
			name: "unknown dependency and duplicate step",
			yaml: tplHeader + "steps:\n  - name: a\n    handler: h\n  - name: b\n    handler: h\n    depends_on: [a, nope]\n  - name: a\n    handler: h\n",
			want: []string{
				`checkout.yaml:7: step "b": depends_on: depends on unknown step "nope"`,
				`checkout.yaml:10: step "a": name: duplicate step name; first defined on line 5`,
			},
		},
		{
			name: "parse and validation errors together",
			yaml: "namespace: shop\nname: bad name\nversion: 1\nsteps:\n  - name: a\n    hander: h\n    timeout: soon\n",
			want: []string{
				`checkout.yaml:6: step "a": unknown key "hander"`,
				`checkout.yaml:7: step "a": timeout: invalid duration "soon" (use Go syntax such as 10ms, 30s, 1m, or days such as 7d)`,
				`checkout.yaml:2: name: "bad name": want letters, digits, '_', '.' and '-', starting with a letter or digit, at most 128 bytes`,
				`checkout.yaml:5: step "a": handler: is required`,
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w, err := Parse("checkout.yaml", []byte(tc.yaml))
			require.Nil(t, w)
			require.Equal(t, tc.want, tplErrorLines(t, err, "checkout.yaml"))
		})
	}
}

func TestParseTemplateErrorFields(t *testing.T) {
	t.Parallel()
	_, err := Parse("checkout.yaml", []byte(tplHeader+"steps:\n  - name: charge\n    handler: h\n    retry: {max_attempts: 0}\n"))
	var de *DefinitionError
	require.ErrorAs(t, err, &de)
	require.Equal(t, DefinitionError{File: "checkout.yaml", Line: 7, Step: "charge", Field: "retry.max_attempts", Msg: "must be at least 1, got 0"}, *de)
}

func TestParseTemplateTestdataErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		file string
		want []string
	}{
		{"cycle.yaml", []string{
			`:5: step "a": depends_on: cycle: a -> c -> b -> a`,
			`:11: step "c": depends_on: depends on unknown step "missing"`,
		}},
		{"errors.yaml", []string{
			`:4: identity: "loose" is not one of [unique strict caller]`,
			`:8: step "charge": unknown key "retrys"`,
			`:9: step "charge": retry.max_attempts: must be an integer, got a string "three"`,
			`:9: step "charge": retry.initial: invalid duration "10 sec" (use Go syntax such as 10ms, 30s, 1m, or days such as 7d)`,
			`:9: step "charge": retry.jitter: must be at least 0, got -0.5`,
			`:10: step "charge": timeout: invalid duration "10 sec" (use Go syntax such as 10ms, 30s, 1m, or days such as 7d)`,
			`:11: step "charge": config: keys must be strings, got an integer "1"`,
			`:11: step "charge": config.ok: a number ".inf" cannot be represented in JSON`,
			`:14: step "ship": depends_on: must be a list, got a string "charge"`,
			`:15: step "ship": priority: must be an integer, got a number "1.5"`,
		}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join("testdata", "templates", tc.file)
			_, err := Load(path)
			want := make([]string, len(tc.want))
			for i, w := range tc.want {
				want[i] = path + w
			}
			require.Equal(t, want, tplErrorLines(t, err, path))
		})
	}
}

// TestParseLargeTemplate: a large template without aliases (here 125,000
// nodes) is not taken for an alias bomb. Within its step limit it parses; past it, the error
// names the steps and the limit.
func TestParseLargeTemplate(t *testing.T) {
	t.Parallel()
	const n = 25_000
	steps := func(limits string) []byte {
		var b strings.Builder
		b.WriteString(tplHeader + limits + "steps:\n")
		for i := range n {
			fmt.Fprintf(&b, "  - name: s%d\n    handler: h\n    config: {url: \"http://x/%d\", tries: [1, 2]}\n", i, i)
		}
		return []byte(b.String())
	}
	for _, tc := range []struct {
		name, limits, want string
	}{
		{name: "within the default limit"},
		{name: "past its limit", limits: "limits: {max_steps: 20000}\n",
			want: `checkout.yaml:5: steps: 25000 steps are more than limits.max_steps (20000)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w, err := Parse("checkout.yaml", steps(tc.limits))
			if tc.want == "" {
				require.NoError(t, err)
				require.Len(t, w.Steps, n)
				return
			}
			require.Error(t, err)
			require.NotContains(t, err.Error(), "aliases")
			require.Contains(t, err.Error(), tc.want)
		})
	}
}

// TestNamesAreBounded: every name a template gives (namespace, workflow,
// version, step, signal, template, schedule) is at most MaxNameLen bytes,
// and the error names the field.
func TestNamesAreBounded(t *testing.T) {
	t.Parallel()
	long, ok := strings.Repeat("n", MaxNameLen+1), strings.Repeat("n", MaxNameLen)
	tpl := func(ns, name, version, step, signal, template, schedule string) string {
		return fmt.Sprintf(`namespace: %s
name: %s
version: %s
templates:
  - {name: %s, handler: h}
schedules:
  - {name: %s, cron: "* * * * *"}
steps:
  - {name: %s, handler: h}
  - {name: w, type: signal, signal: {name: %s}}
`, ns, name, version, template, schedule, step, signal)
	}
	_, err := Parse("ok.yaml", []byte(tpl(ok, ok, ok, ok, ok, ok, ok)))
	require.NoError(t, err, "names of MaxNameLen bytes")
	for _, tt := range []struct{ field, yaml string }{
		{"namespace", tpl(long, "a", "1", "s", "g", "t", "c")},
		{"name", tpl("a", long, "1", "s", "g", "t", "c")},
		{"version", tpl("a", "a", long, "s", "g", "t", "c")},
		{"name", tpl("a", "a", "1", long, "g", "t", "c")},
		{"signal.name", tpl("a", "a", "1", "s", long, "t", "c")},
		{"templates.name", tpl("a", "a", "1", "s", "g", long, "c")},
		{"schedules[0].name", tpl("a", "a", "1", "s", "g", "t", long)},
	} {
		_, err := Parse("long.yaml", []byte(tt.yaml))
		require.ErrorContains(t, err, tt.field+": ", tt.field)
		require.ErrorContains(t, err, "at most 128 bytes", tt.field)
	}
}
