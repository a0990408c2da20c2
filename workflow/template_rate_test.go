package workflow

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/store"
)

func TestTemplateRateLimit(t *testing.T) {
	t.Parallel()
	w, err := Parse("mail.yaml", []byte(`namespace: shop
name: mail
version: "1"
steps:
  - name: send
    handler: shop.send
    rate_limit: { limit: 50, per: 1s, key: input.customer }
  - name: report
    handler: shop.report
    depends_on: [send]
    rate_limit:
      limit: 100
      per: 1m
`))
	require.NoError(t, err)
	require.Equal(t, &RateLimit{Limit: 50, Per: Duration(time.Second), Key: "input.customer", line: 7, keyLine: 7, perGiven: true}, w.Steps[0].RateLimit)
	require.Equal(t, store.Rate{Limit: 100, Per: time.Minute}, w.Steps[1].RateLimit.Rate())
	require.Empty(t, w.Steps[1].RateLimit.Key)
}

func TestTemplateRateLimitErrors(t *testing.T) {
	t.Parallel()
	head := "namespace: shop\nname: mail\nversion: \"1\"\n"
	step := head + "steps:\n  - name: a\n    handler: h\n    rate_limit: "
	tests := []struct {
		name, yaml, want string
	}{
		{"limit zero", step + "{ limit: 0, per: 1s }\n", `x.yaml:7: step "a": rate_limit.limit: must be from 1 to 1000000, got 0`},
		{"limit missing", step + "{ per: 1s }\n", `x.yaml:7: step "a": rate_limit.limit: must be from 1 to 1000000, got 0`},
		{"limit too large", step + "{ limit: 2000000, per: 1s }\n", `rate_limit.limit: must be from 1 to 1000000, got 2000000`},
		{"per missing", step + "{ limit: 5 }\n", `x.yaml:7: step "a": rate_limit.per: is required`},
		{"per negative", step + "{ limit: 5, per: -1s }\n", `x.yaml:7: step "a": rate_limit.per: duration "-1s" must not be negative`},
		{"per zero", step + "{ limit: 5, per: 0s }\n", `x.yaml:7: step "a": rate_limit.per: must be from 1ms to 24h0m0s, got 0s`},
		{"per too short", step + "{ limit: 5, per: 10us }\n", `rate_limit.per: must be from 1ms to 24h0m0s, got 10µs`},
		{"per too long", step + "{ limit: 5, per: 48h }\n", `rate_limit.per: must be from 1ms to 24h0m0s, got 48h0m0s`},
		{"per not a duration", step + "{ limit: 5, per: often }\n", `x.yaml:7: step "a": rate_limit.per:`},
		{"unknown key", step + "{ limit: 5, per: 1s, burst: 10 }\n", `x.yaml:7: step "a": rate_limit: unknown key "burst"`},
		{"bad expression", step + "\n      limit: 1\n      per: 1s\n      key: input.(\n", `x.yaml:10: step "a": rate_limit.key: invalid key expression`},
		{"deps in key", step + "{ limit: 1, per: 1s, key: deps.a }\n", `rate_limit.key: invalid key expression "deps.a"`},
		{"signal step", head + "steps:\n  - name: a\n    type: signal\n    signal: { name: go }\n    rate_limit: { limit: 1, per: 1s }\n",
			`x.yaml:8: step "a": rate_limit: a signal step runs nothing to limit`},
		{"template", head + "templates:\n  - name: t\n    handler: h\n    rate_limit: { limit: 1, per: 1s }\nsteps:\n  - name: a\n    handler: h\n",
			`templates: a template has only`},
		{"on the workflow", head + "rate_limit: { limit: 1, per: 1s }\nsteps:\n  - name: a\n    handler: h\n", `x.yaml:4: unknown key "rate_limit"`},
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

func TestWithRateLimit(t *testing.T) {
	t.Parallel()
	w := New("shop", "mail", "1").Step("send", "h", WithRateLimit(10, time.Second, "input.customer"))
	require.NoError(t, w.Validate())
	require.Equal(t, store.Rate{Limit: 10, Per: time.Second}, w.Steps[0].RateLimit.Rate())
	bad := New("shop", "mail", "1").Step("send", "h", WithRateLimit(0, 0, "input.("))
	err := bad.Validate()
	require.Error(t, err)
	for _, want := range []string{"rate_limit.limit", "rate_limit.per", "rate_limit.key"} {
		require.Contains(t, err.Error(), want)
	}
}
