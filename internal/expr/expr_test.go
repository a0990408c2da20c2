package expr

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestEval(t *testing.T) {
	t.Parallel()
	input := json.RawMessage(`{"amount": 1500, "country": "FR", "tags": ["vip"], "nested": {"ok": true}}`)
	deps := map[string]json.RawMessage{"check": json.RawMessage(`{"score": 0.7}`), "risk-2": json.RawMessage(`"low"`)}
	tests := []struct {
		src  string
		want bool
	}{
		{`input.amount > 1000`, true},
		{`input.amount > 1000.5`, true},
		{`input.amount <= 1000`, false},
		{`input.amount == 1500`, true},
		{`input.country == "FR" && input.amount > 100`, true},
		{`input.country in ["DE", "AT"] || input.nested.ok`, true},
		{`"vip" in input.tags`, true},
		{`size(input.tags) == 0`, false},
		{`has(input.missing)`, false},
		{`has(input.nested.ok) && !input.nested.ok`, false},
		{`deps.check.score >= 0.5`, true},
		{`deps["risk-2"] == "low"`, true},
		{`"absent" in deps`, false},
		{`input.country.startsWith("F")`, true},
		{`true`, true},
	}
	for _, tt := range tests {
		t.Run(tt.src, func(t *testing.T) {
			t.Parallel()
			x, err := Compile(tt.src)
			require.NoError(t, err)
			got, err := x.Eval(input, deps)
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestCompileErrors(t *testing.T) {
	t.Parallel()
	for _, src := range []string{``, `input.amount >`, `1 + 2`, `"text"`, `undefined_var > 1`, `input.x = 1`} {
		_, err := Compile(src)
		require.Error(t, err, src)
	}
}

func TestEvalErrors(t *testing.T) {
	t.Parallel()
	tests := []struct{ src, input string }{
		{`input.missing > 1`, `{}`},             // no such key
		{`input.amount > 1`, `{"amount": "x"}`}, // no matching overload
		{`input`, `{"a": 1}`},                   // not a boolean
	}
	for _, tt := range tests {
		x, err := Compile(tt.src)
		require.NoError(t, err, tt.src)
		_, err = x.Eval(json.RawMessage(tt.input), nil)
		require.Error(t, err, tt.src)
	}
}

func TestCostLimit(t *testing.T) {
	t.Parallel()
	// Nested comprehensions over a large list exceed the cost limit
	// instead of running for long.
	x, err := Compile(`input.l.all(a, input.l.all(b, input.l.all(c, a + b + c >= 0)))`)
	require.NoError(t, err)
	l := make([]int, 200)
	in, _ := json.Marshal(map[string]any{"l": l})
	_, err = x.Eval(in, nil)
	require.ErrorContains(t, err, "cost")
}
