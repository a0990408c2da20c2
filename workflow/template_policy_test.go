package workflow

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTemplateConcurrency(t *testing.T) {
	t.Parallel()
	w, err := Parse("checkout.yaml", []byte(`namespace: shop
name: checkout
version: "1"
concurrency: { limit: 10, key: input.region }
steps:
  - name: charge
    handler: shop.charge
    concurrency: { limit: 1, key: input.customer }
  - name: ship
    handler: shop.ship
    depends_on: [charge]
    concurrency: { limit: 4 }
`))
	require.NoError(t, err)
	require.Equal(t, 10, w.Concurrency.Limit)
	require.Equal(t, "input.region", w.Concurrency.Key)
	require.Equal(t, 1, w.Steps[0].Concurrency.Limit)
	require.Equal(t, "input.customer", w.Steps[0].Concurrency.Key)
	require.Equal(t, 4, w.Steps[1].Concurrency.Limit)
	require.Empty(t, w.Steps[1].Concurrency.Key)
}

func TestTemplateConcurrencyErrors(t *testing.T) {
	t.Parallel()
	head := "namespace: shop\nname: checkout\nversion: \"1\"\n"
	tests := []struct {
		name, yaml, want string
	}{
		{"limit zero", head + "steps:\n  - name: a\n    handler: h\n    concurrency: { limit: 0 }\n",
			`x.yaml:7: step "a": concurrency.limit: must be at least 1, got 0`},
		{"limit missing", head + "steps:\n  - name: a\n    handler: h\n    concurrency: { key: input.c }\n",
			`x.yaml:7: step "a": concurrency.limit: must be at least 1, got 0`},
		{"unknown key", head + "steps:\n  - name: a\n    handler: h\n    concurrency: { limit: 1, per: 1s }\n",
			`x.yaml:7: step "a": concurrency: unknown key "per"`},
		{"bad expression", head + "steps:\n  - name: a\n    handler: h\n    concurrency:\n      limit: 1\n      key: input.(\n",
			`x.yaml:9: step "a": concurrency.key: invalid key expression`},
		{"list key", head + "steps:\n  - name: a\n    handler: h\n    concurrency: { limit: 1, key: '[1, 2]' }\n",
			`concurrency.key: key expression "[1, 2]" yields list`},
		{"workflow limit", head + "concurrency:\n  limit: -1\nsteps:\n  - name: a\n    handler: h\n",
			`x.yaml:5: concurrency.limit: must be at least 1, got -1`},
		{"deps in key", head + "concurrency: { limit: 1, key: deps.a }\nsteps:\n  - name: a\n    handler: h\n",
			`x.yaml:4: concurrency.key: invalid key expression "deps.a"`},
		{"signal step", head + "steps:\n  - name: a\n    type: signal\n    signal: { name: go }\n    concurrency: { limit: 1 }\n",
			`x.yaml:8: step "a": concurrency: a signal step runs nothing to limit`},
		{"template", head + "templates:\n  - name: t\n    handler: h\n    concurrency: { limit: 1 }\nsteps:\n  - name: a\n    handler: h\n",
			`templates: a template has only`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse("x.yaml", []byte(tt.yaml))
			require.Error(t, err)
			require.Contains(t, err.Error(), tt.want)
			require.Equal(t, 1, strings.Count(err.Error(), "x.yaml:"), "one problem: %v", err)
		})
	}
}
