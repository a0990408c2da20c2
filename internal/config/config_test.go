package config

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestInterpolate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "token"), []byte("tok-123\n"), 0o600))
	vars := env(map[string]string{"HOST": "db.internal", "EMPTY": ""})
	tests := []struct {
		in, want string
		fromFile bool
		err      string
	}{
		{in: "plain", want: "plain"},
		{in: "postgres://${HOST}/weft", want: "postgres://db.internal/weft"},
		{in: "${MISSING:-fallback}", want: "fallback"},
		{in: "${EMPTY:-fallback}", want: "fallback"},
		{in: "${HOST:-fallback}", want: "db.internal"},
		{in: "cost: $$5 and $HOME", want: "cost: $5 and $HOME"},
		{in: "${file:token}", want: "tok-123", fromFile: true},
		{in: "Bearer ${file:" + filepath.Join(dir, "token") + "}", want: "Bearer tok-123", fromFile: true},
		{in: "${MISSING}", err: "${MISSING}: MISSING is not set"},
		{in: "${file:nope}", err: "${file:nope}: open"},
		{in: "${file:}", err: "a path is required"},
		{in: "${secret:TOKEN}", err: "secrets are named in workflow templates"},
		{in: "${1X}", err: "want ${VAR}"},
		{in: "x ${HOST", err: "${ is not closed"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			got, fromFile, err := Interpolate(tt.in, vars, dir)
			if tt.err != "" {
				require.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
			require.Equal(t, tt.fromFile, fromFile)
		})
	}
}

var schema = map[string]Kind{"db": Scalar, "serve.addr": Scalar, "serve.jwt.issuer": Scalar, "engine.caps": Map, "tags": List}

func TestLoad(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, yaml string
		want       map[string][]string
		err        string
	}{
		{name: "empty", yaml: "", want: map[string][]string{}},
		{name: "comments only", yaml: "# nothing\n", want: map[string][]string{}},
		{name: "values", yaml: "db: ${DB}\nserve:\n  addr: :8080\n  jwt:\n    issuer: me\nengine:\n  caps: {shop: 2, mail: 1}\ntags: [a, b]\n",
			want: map[string][]string{"db": {"x.db"}, "serve.addr": {":8080"}, "serve.jwt.issuer": {"me"}, "engine.caps": {"shop=2", "mail=1"}, "tags": {"a", "b"}}},
		{name: "null sets nothing", yaml: "db:\n", want: map[string][]string{}},
		{name: "unknown top key", yaml: "db: x\ndatabase: y\n", err: "weft.yaml:2: unknown key \"database\""},
		{name: "unknown nested key", yaml: "serve:\n  addr: x\n  adr: y\n", err: "weft.yaml:3: unknown key \"serve.adr\""},
		{name: "section not a mapping", yaml: "serve: 3\n", err: "weft.yaml:1: serve must be a mapping"},
		{name: "wrong kind", yaml: "engine:\n  caps: [a]\n", err: "weft.yaml:2: engine.caps: want a mapping"},
		{name: "scalar wanted", yaml: "db: [a]\n", err: "weft.yaml:1: db: want a single value"},
		{name: "twice", yaml: "db: a\ndb: b\n", err: "weft.yaml:2: db is set twice"},
		{name: "bad interpolation", yaml: "db: x\nserve:\n  addr: ${NOPE}\n", err: "weft.yaml:3: serve.addr: ${NOPE}: NOPE is not set"},
		{name: "not a mapping", yaml: "- a\n", err: "weft.yaml:1: the configuration must be a mapping"},
		{name: "syntax", yaml: "db: [\n", err: "weft.yaml: yaml:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			path := filepath.Join(dir, "weft.yaml")
			require.NoError(t, os.WriteFile(path, []byte(tt.yaml), 0o600))
			got, err := Load(path, schema, env(map[string]string{"DB": "x.db"}))
			if tt.err != "" {
				require.Error(t, err)
				require.Contains(t, err.Error(), filepath.Join(dir, tt.err))
				return
			}
			require.NoError(t, err)
			items := map[string][]string{}
			for k, v := range got {
				items[k] = v.Items
			}
			require.Equal(t, tt.want, items)
		})
	}
}
