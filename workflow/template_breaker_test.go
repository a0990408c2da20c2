package workflow

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestTemplateCircuitBreaker(t *testing.T) {
	t.Parallel()
	w, err := Parse("checkout.yaml", []byte(`namespace: shop
name: checkout
version: "1"
steps:
  - name: charge
    handler: shop.charge
    circuit_breaker: { failures: 5, cooldown: 30s }
  - name: ship
    handler: shop.ship
    depends_on: [charge]
`))
	require.NoError(t, err)
	require.Equal(t, &CircuitBreaker{Failures: 5, Cooldown: Duration(30 * time.Second), line: 7}, w.Steps[0].CircuitBreaker)
	require.Nil(t, w.Steps[1].CircuitBreaker)
	require.Equal(t, "shop/checkout/charge", BreakerKey(w.Namespace, w.Name, w.Steps[0].Name))

	// The definition is stored as JSON and read back the same.
	b, err := json.Marshal(w.Steps[0])
	require.NoError(t, err)
	require.Contains(t, string(b), `"circuit_breaker":{"failures":5,"cooldown":"30s"}`)
	var back Step
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, 5, back.CircuitBreaker.Failures)
	require.Equal(t, Duration(30*time.Second), back.CircuitBreaker.Cooldown)

	// The Go builder says the same.
	g := New("shop", "checkout", "1").Step("charge", "shop.charge", WithCircuitBreaker(5, 30*time.Second))
	require.NoError(t, g.Validate())
	require.Equal(t, 5, g.Steps[0].CircuitBreaker.Failures)
}

func TestTemplateCircuitBreakerErrors(t *testing.T) {
	t.Parallel()
	head := "namespace: shop\nname: checkout\nversion: \"1\"\nsteps:\n  - name: a\n"
	tests := []struct {
		name, yaml, want string
	}{
		{"failures zero", head + "    handler: h\n    circuit_breaker: { failures: 0, cooldown: 1s }\n",
			`x.yaml:7: step "a": circuit_breaker.failures: must be 1 to 1000000, got 0`},
		{"failures missing", head + "    handler: h\n    circuit_breaker: { cooldown: 1s }\n",
			`x.yaml:7: step "a": circuit_breaker.failures: must be 1 to 1000000, got 0`},
		{"cooldown missing", head + "    handler: h\n    circuit_breaker:\n      failures: 3\n",
			`x.yaml:8: step "a": circuit_breaker.cooldown: must be at least 1ms and at most 168h0m0s, got 0s`},
		{"cooldown too long", head + "    handler: h\n    circuit_breaker: { failures: 3, cooldown: 200h }\n",
			`x.yaml:7: step "a": circuit_breaker.cooldown: must be at least 1ms and at most 168h0m0s, got 200h0m0s`},
		{"unknown key", head + "    handler: h\n    circuit_breaker: { failures: 3, cooldown: 1s, window: 1m }\n",
			`x.yaml:7: step "a": circuit_breaker: unknown key "window"`},
		{"signal step", head + "    type: signal\n    signal: { name: go }\n    circuit_breaker: { failures: 3, cooldown: 1s }\n",
			`x.yaml:8: step "a": circuit_breaker: a signal step runs nothing that could fail`},
		{"workflow step", head + "    type: workflow\n    workflow: shop/other\n    circuit_breaker: { failures: 3, cooldown: 1s }\n",
			`x.yaml:8: step "a": circuit_breaker: a workflow step runs nothing itself`},
		{"template", "namespace: shop\nname: checkout\nversion: \"1\"\ntemplates:\n  - name: t\n    handler: h\n    circuit_breaker: { failures: 1, cooldown: 1s }\nsteps:\n  - name: a\n    handler: h\n",
			`templates: a template has only`},
	}
	_, err := Parse("x.yaml", []byte(head+"    handler: h\n    circuit_breaker: { failures: 3, cooldown: soon }\n"))
	require.ErrorContains(t, err, `x.yaml:7: step "a": circuit_breaker.cooldown: invalid duration "soon"`)
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
