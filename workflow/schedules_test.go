package workflow

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const scheduledYAML = `namespace: ops
name: report
version: "1"
limits: { max_depth: 3, max_children: 20 }
schedules:
  - name: nightly
    cron: "30 2 * * *"
    time_zone: America/New_York
    input: { scope: all, n: 1 }
    catch_up: all
    max_catch_up: 3
steps:
  - name: quote
    handler: shop.quote
  - name: ship
    type: workflow
    workflow: shop/shipping@2
    input: '{"order": input.order, "price": deps.quote.amount}'
    depends_on: [quote]
`

func TestScheduleAndSubWorkflowTemplate(t *testing.T) {
	t.Parallel()
	w, err := Parse("report.yaml", []byte(scheduledYAML))
	require.NoError(t, err)
	require.Equal(t, []Schedule{{Name: "nightly", Cron: "30 2 * * *", TimeZone: "America/New_York", Input: json.RawMessage(`{"scope":"all","n":1}`),
		CatchUp: CatchUpAll, MaxCatchUp: 3, line: 6}}, w.Schedules)
	require.Equal(t, Limits{MaxDepth: 3, MaxChildren: 20}, w.Limits)
	ship := w.Steps[1]
	require.Equal(t, StepWorkflow, ship.Type)
	require.Equal(t, "shop/shipping@2", ship.Workflow)
	require.Equal(t, `{"order": input.order, "price": deps.quote.amount}`, ship.Input)

	// The Go builder makes the same definition.
	b := New("ops", "report", "1").WithLimits(Limits{MaxDepth: 3, MaxChildren: 20}).
		Schedule("nightly", "30 2 * * *", InTimeZone("America/New_York"), ScheduleInput(map[string]any{"scope": "all", "n": 1}), WithCatchUp(CatchUpAll, 3)).
		Step("quote", "shop.quote").
		Step("ship", "", AsSubWorkflow("shop/shipping@2", `{"order": input.order, "price": deps.quote.amount}`), DependsOn("quote"))
	require.NoError(t, b.Validate())
	got, err := json.Marshal(b)
	require.NoError(t, err)
	want, err := json.Marshal(w)
	require.NoError(t, err)
	require.JSONEq(t, string(want), string(got))
}

func TestScheduleAndSubWorkflowErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, old, new, want string }{
		{"bad cron", `"30 2 * * *"`, `"30 2 * *"`, `report.yaml:6: schedules.nightly.cron: cron expression "30 2 * *"`},
		{"seconds field", `"30 2 * * *"`, `"0 30 2 * * *"`, ""},
		{"every", `"30 2 * * *"`, `"@every 90s"`, ""},
		{"sub-second every", `"30 2 * * *"`, `"@every 1500ms"`, "whole seconds"},
		{"tz in expression", `"30 2 * * *"`, `"CRON_TZ=UTC 30 2 * * *"`, "give the time zone in time_zone"},
		{"bad zone", "America/New_York", "America/Gotham", `schedules.nightly.time_zone: unknown time zone "America/Gotham"`},
		{"bad policy", "catch_up: all", "catch_up: some", `schedules[0].catch_up: "some" is not one of [skip latest all]`},
		{"catch-up bound", "max_catch_up: 3", "max_catch_up: 5000", "max_catch_up: must be at most 1000"},
		{"input not a mapping", "input: { scope: all, n: 1 }", "input: [1]", "schedules[0].input: must be a mapping"},
		{"duplicate name", "steps:", "  - name: nightly\n    cron: \"@daily\"\nsteps:", `duplicate schedule "nightly"`},
		{"unnamed", "  - name: nightly\n", "  - cron: \"@daily\"\n  - name: nightly\n", "schedules[0].name: every schedule needs a name"},
		{"unknown key", "max_catch_up: 3", "max_catch_up: 3\n    jitter: 5s", `unknown key "jitter"`},
		{"workflow step with handler", "    type: workflow\n", "    type: workflow\n    handler: x\n", "a workflow step runs no handler"},
		{"workflow step without workflow", "    workflow: shop/shipping@2\n", "", "a workflow step names the workflow"},
		{"bad reference", "shop/shipping@2", "shipping", `"shipping": want namespace/name`},
		{"child of itself", "shop/shipping@2", "ops/report", "cannot start a child of itself"},
		{"input not an object", `'{"order": input.order, "price": deps.quote.amount}'`, `'1 + 1'`, "not a map"},
		{"input does not compile", `'{"order": input.order, "price": deps.quote.amount}'`, `'{"order": '`, "invalid expression"},
		{"workflow on a plain step", "    handler: shop.quote\n", "    handler: shop.quote\n    workflow: a/b\n", "only workflow steps start a child workflow"},
		{"bad limit", "max_depth: 3", "max_depth: 0", "limits.max_depth: must be at least 1"},
		{"supersede", "version: \"1\"\n", "version: \"1\"\non_conflict: supersede\n", ""},
		{"retention", "version: \"1\"\n", "version: \"1\"\nretention: {completed: 1s, failed: 7d}\n", ""},
		{"step priority", "    handler: shop.quote\n", "    handler: shop.quote\n    priority: 1000000\n", ""},
		{"step priority too high", "    handler: shop.quote\n", "    handler: shop.quote\n    priority: 9223372036854775807\n", "priority: must be from -1000000 to 1000000"},
		{"too many attempts", "    handler: shop.quote\n", "    handler: shop.quote\n    retry: {max_attempts: 1001}\n", "max_attempts must be from 1 to 1000"},
		{"retention too short", "version: \"1\"\n", "version: \"1\"\nretention: {completed: 1ms}\n", "retention.completed: must be at least 1s, got 1ms"},
		{"a key the input has", "version: \"1\"\n", "version: \"1\"\nconcurrency: {limit: 1, key: input.scope}\n", ""},
		{"a key the input lacks", "version: \"1\"\n", "version: \"1\"\nconcurrency: {limit: 1, key: input.customer}\n",
			`report.yaml:7: schedules.nightly.input: concurrency.key cannot be computed from it: evaluate key "input.customer": no such key: customer`},
		{"a step's rate key the input lacks", "    handler: shop.quote\n", "    handler: shop.quote\n    rate_limit: {limit: 5, per: 1s, key: input.region}\n",
			`schedules.nightly.input: step "quote" rate_limit.key cannot be computed from it`},
		{"bad on_conflict", "version: \"1\"\n", "version: \"1\"\non_conflict: replace\n", `on_conflict: "replace" is not one of [return supersede]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			src := strings.Replace(scheduledYAML, tc.old, tc.new, 1)
			require.NotEqual(t, scheduledYAML, src, "the case changes nothing")
			_, err := Parse("report.yaml", []byte(src))
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestOnConflictBuilder(t *testing.T) {
	t.Parallel()
	w, err := Parse("w.yaml", []byte("namespace: a\nname: b\nversion: \"1\"\non_conflict: supersede\nsteps:\n  - name: s\n    handler: h\n"))
	require.NoError(t, err)
	require.Equal(t, OnConflictSupersede, w.OnConflict)
	b := New("a", "b", "1").WithOnConflict(OnConflictSupersede).Step("s", "h")
	require.Equal(t, w.OnConflict, b.OnConflict)
	require.ErrorContains(t, New("a", "b", "1").WithOnConflict("replace").Step("s", "h").Validate(), `unknown strategy "replace"`)
}
