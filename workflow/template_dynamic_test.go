package workflow

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const dynamicTemplate = `namespace: shop
name: orders
version: "1"
limits: {max_decision_depth: 2, max_steps: 500}
templates:
  - name: item
    handler: shop.item
    retry: {max_attempts: 4}
steps:
  - name: split
    type: batch
    handler: shop.split
    worker: item
  - name: route
    type: decision
    handler: shop.route
    depends_on: [split]
  - name: big
    handler: shop.big
    depends_on: [route]
    when: input.amount > 1000
  - name: approval
    type: signal
    depends_on: [route]
    signal: {name: approve, timeout: 1h}
  - name: join
    type: converge
    handler: shop.join
    depends_on: [big, approval]
  - name: cleanup
    handler: shop.cleanup
    depends_on: [join]
    trigger_rule: all_done
`

func TestTemplateDynamicKeys(t *testing.T) {
	t.Parallel()
	w, err := Parse("orders.yaml", []byte(dynamicTemplate))
	require.NoError(t, err)
	require.Equal(t, Limits{MaxDecisionDepth: 2, MaxSteps: 500}, w.Limits)
	require.Len(t, w.Templates, 1)
	require.Equal(t, "shop.item", w.Templates[0].Handler)
	require.Equal(t, 4, w.Templates[0].Retry.MaxAttempts)
	steps := map[string]Step{}
	for _, s := range w.Steps {
		steps[s.Name] = s
	}
	require.Equal(t, StepBatch, steps["split"].Type)
	require.Equal(t, "item", steps["split"].Worker)
	require.Equal(t, StepDecision, steps["route"].Type)
	require.Equal(t, "input.amount > 1000", steps["big"].When)
	require.Equal(t, &SignalWait{Name: "approve", Timeout: Duration(time.Hour)}, steps["approval"].Signal)
	require.Equal(t, StepConverge, steps["join"].Type)
	require.Equal(t, AllDone, steps["cleanup"].TriggerRule)
}

func TestTemplateDynamicErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, replace, with, want string
	}{
		{"unknown type", "type: decision", "type: switch", `orders.yaml:15: step "route": type: "switch" is not one of [decision converge batch signal workflow function]`},
		{"unknown rule", "trigger_rule: all_done", "trigger_rule: most", `orders.yaml:33: step "cleanup": trigger_rule: "most" is not one of`},
		{"bad condition", "when: input.amount > 1000", "when: input.amount >", `orders.yaml:18: step "big": when: invalid expression "input.amount >"`},
		{"condition not boolean", "when: input.amount > 1000", "when: input.amount + 1", `step "big": when: expression "input.amount + 1" yields`},
		{"batch without worker", "    worker: item\n", "", `step "split": worker: a batch step names the template its items run`},
		{"unknown worker", "worker: item", "worker: nothing", `step "split": worker: no template named "nothing"`},
		{"worker on a plain step", "    when: input.amount > 1000", "    worker: item", `step "big": worker: only batch steps have a worker`},
		{"signal step with handler", "    signal: {name: approve, timeout: 1h}", "    signal: {name: approve}\n    handler: x", `step "approval": handler: a signal step runs no handler`},
		{"the engine's signal handler", "handler: shop.big", "handler: weft.signal", `orders.yaml:18: step "big": handler: "weft.signal" is the engine's own: use type: signal`},
		{"the engine's workflow handler", "handler: shop.item", "handler: weft.workflow", `step "item": templates.handler: "weft.workflow" is the engine's own: use type: workflow`},
		{"signal on a plain step", "    trigger_rule: all_done", "    signal: {name: x}", `step "cleanup": signal: only signal steps wait for a signal`},
		{"unknown signal key", "signal: {name: approve, timeout: 1h}", "signal: {name: approve, after: 1h}", `orders.yaml:25: step "approval": signal: unknown key "after"`},
		{"bad signal timeout", "timeout: 1h}", "timeout: soon}", `step "approval": signal.timeout: invalid duration "soon"`},
		{"template with dependencies", "    retry: {max_attempts: 4}", "    depends_on: [split]", `step "item": templates: a template has only handler`},
		{"converge with another rule", "    depends_on: [big, approval]", "    depends_on: [big, approval]\n    trigger_rule: all_done", `step "join": trigger_rule: a converge step's rule is none_failed_min_one_success`},
		{"unknown limit", "max_steps: 500", "max_tasks: 500", `orders.yaml:4: limits: unknown key "max_tasks"`},
		{"too many steps", "max_steps: 500", "max_steps: 3", `steps: 6 steps are more than limits.max_steps (3)`},
		{"decisions nested too deep", "max_decision_depth: 2", "max_decision_depth: 1\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			src := strings.Replace(dynamicTemplate, tt.replace, tt.with, 1)
			require.NotEqual(t, dynamicTemplate, src, "the replacement applies")
			if tt.name == "decisions nested too deep" {
				// route is a decision; add one below it and a step below both.
				src += "  - name: inner\n    type: decision\n    handler: shop.route\n    depends_on: [route]\n" +
					"  - name: deep\n    handler: shop.deep\n    depends_on: [inner]\n"
				tt.want = `orders.yaml:39: step "deep": depends_on: lies below 2 nested decisions, more than limits.max_decision_depth (1)`
			}
			_, err := Parse("orders.yaml", []byte(src))
			require.Error(t, err)
			require.Contains(t, err.Error(), tt.want, fmt.Sprintf("source:\n%s", src))
		})
	}
}
