package dashboard_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/dashboard"
	"github.com/weftrun/weft/store"
)

// stepsBuilder builds a task's steps for the graph: each with its handler and
// dependencies.
type stepsBuilder []weft.TaskStep

func (b stepsBuilder) step(name, handler string, deps ...string) stepsBuilder {
	return append(b, weft.TaskStep{Name: name, Handler: handler, DependsOn: deps})
}

// many adds n steps named prefix01, prefix02, ... running handler after
// deps.
func (b stepsBuilder) many(n int, prefix, handler string, deps ...string) stepsBuilder {
	for i := range n {
		b = b.step(fmt.Sprintf("%s%02d", prefix, i+1), handler, deps...)
	}
	return b
}

// items adds n items of batch step batch, as the store creates them:
// named batch[i], of kind item, with the template and no dependencies.
func (b stepsBuilder) items(n int, batch, template string) stepsBuilder {
	for i := range n {
		b = append(b, weft.TaskStep{Name: fmt.Sprintf("%s[%d]", batch, i), Handler: "h." + template, Kind: store.KindItem, Template: template})
	}
	return b
}

func (b stepsBuilder) signal(name, signal string, deps ...string) stepsBuilder {
	return append(b, weft.TaskStep{Name: name, Kind: store.KindSignal, Signal: signal, DependsOn: deps})
}

func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%02d", prefix, i+1)
	}
	return out
}

func TestGroupGraph(t *testing.T) {
	t.Parallel()
	// load → split (a batch) → sum; clipped, so that each case's items
	// are its own.
	batch := slices.Clip(stepsBuilder{}.step("load", "h").
		with(weft.TaskStep{Name: "split", Handler: "h.split", Kind: store.KindBatch, DependsOn: []string{"load"}}).
		step("sum", "h", "split"))
	tests := []struct {
		name   string
		steps  []weft.TaskStep
		expand []string
		nodes  []string
		edges  []string
	}{
		{"chain", stepsBuilder{}.step("a", "h").step("b", "h", "a").step("c", "h", "b"),
			nil, []string{"a", "b", "c"}, []string{"a → b", "b → c"}},
		{"diamond", stepsBuilder{}.step("a", "h").step("b", "h", "a").step("c", "h", "a").step("d", "h", "b", "c"),
			nil, []string{"a", "b", "c", "d"}, []string{"a → b", "a → c", "b → d", "c → d"}},
		{"fan-out of 50 leaves", stepsBuilder{}.step("start", "h").many(50, "leaf-", "h", "start"),
			nil, []string{"start", "leaf-* ×50"}, []string{"start → leaf-*"}},
		{"fan-out of 50 between two steps", stepsBuilder{}.step("fetch", "h").many(50, "resize-", "h", "fetch").step("publish", "h", names("resize-", 50)...),
			nil, []string{"fetch", "resize-* ×50", "publish"}, []string{"fetch → resize-*", "resize-* → publish"}},
		{"fan-out of 12, expanded", stepsBuilder{}.step("start", "h").many(12, "leaf-", "h", "start"),
			[]string{"leaf-*"}, append([]string{"start"}, names("leaf-", 12)...), func() []string {
				var out []string
				for _, n := range names("leaf-", 12) {
					out = append(out, "start → "+n)
				}
				return out
			}()},
		{"eight siblings stay steps", stepsBuilder{}.step("start", "h").many(8, "leaf-", "h", "start"),
			nil, append([]string{"start"}, names("leaf-", 8)...), func() []string {
				var out []string
				for _, n := range names("leaf-", 8) {
					out = append(out, "start → "+n)
				}
				return out
			}()},
		{"batch of 50 items", batch.items(50, "split", "enrich"),
			nil, []string{"load", "split", "split[*] ×50", "sum"}, []string{"load → split", "split → split[*]", "split[*] → sum"}},
		{"batch before its items", batch,
			nil, []string{"load", "split", "sum"}, []string{"load → split", "split → sum"}},
		{"batch of 250 items, expanded", batch.items(250, "split", "enrich"),
			[]string{"split[*]"}, func() []string {
				out := []string{"load", "split"}
				for i := range 200 {
					out = append(out, fmt.Sprintf("split[%d]", i))
				}
				return append(out, "split[*] +50", "sum")
			}(), func() []string {
				out := []string{"load → split"}
				for i := range 200 {
					out = append(out, fmt.Sprintf("split → split[%d]", i))
				}
				out = append(out, "split → split[*]")
				for i := range 200 {
					out = append(out, fmt.Sprintf("split[%d] → sum", i))
				}
				return append(out, "split[*] → sum")
			}()},
		{"mixed: grouped by handler and by neighbours", stepsBuilder{}.step("start", "h").
			many(10, "x", "h.x", "start").many(10, "y", "h.y", "start").many(10, "z", "h.x", "start").
			step("join", "h", append(names("x", 10), names("y", 10)...)...).
			signal("approve", "approved", "start").signal("review", "reviewed", "start"),
			nil, []string{"start", "x* ×10", "y* ×10", "z* ×10", "join", "approve", "review"},
			[]string{"start → x*", "start → y*", "start → z*", "x* → join", "y* → join", "start → approve", "start → review"}},
		{"a group's glob is not a step's name", stepsBuilder{}.step("start", "h").step("leaf-*", "h.other", "start").many(10, "leaf-", "h", "start"),
			nil, []string{"start", "leaf-*", "leaf-*2 ×10"}, []string{"start → leaf-*", "start → leaf-*2"}},
		{"no common name: the handler names the group", stepsBuilder{}.step("start", "h").
			step("alpha", "h.w", "start").step("bravo", "h.w", "start").step("charlie", "h.w", "start").step("delta", "h.w", "start").
			step("echo", "h.w", "start").step("foxtrot", "h.w", "start").step("golf", "h.w", "start").step("hotel", "h.w", "start").step("india", "h.w", "start"),
			nil, []string{"start", "(h.w)* ×9"}, []string{"start → (h.w)*"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			nodes, edges := dashboard.GraphOf(tc.steps, tc.expand...)
			require.Equal(t, tc.nodes, nodes)
			require.ElementsMatch(t, tc.edges, edges)
		})
	}
}

func (b stepsBuilder) with(s weft.TaskStep) stepsBuilder { return append(b, s) }

// TestGroupGraphManySmallFanOuts: 80 fan-outs of 5 steps each stay steps
// until the graph would have more than 400 nodes; then they are groups
// too.
func TestGroupGraphManySmallFanOuts(t *testing.T) {
	t.Parallel()
	build := func(hubs int) stepsBuilder {
		b := stepsBuilder{}.step("start", "h")
		for i := range hubs {
			hub := fmt.Sprintf("hub%02d", i+1)
			b = b.step(hub, "h.hub", "start").many(5, hub+"-", "h.leaf", hub)
		}
		return b
	}
	nodes, edges := dashboard.GraphOf(build(60))
	require.Len(t, nodes, 1+60+300, "361 nodes: every step drawn")
	require.Len(t, edges, 60+300)
	nodes, edges = dashboard.GraphOf(build(80))
	require.Len(t, nodes, 1+80+80, "481 steps: the fan-outs of 5 are groups")
	require.Equal(t, []string{"start", "hub01", "hub01-* ×5", "hub02", "hub02-* ×5"}, nodes[:5])
	require.Len(t, edges, 80+80)
	require.Contains(t, edges, "hub80 → hub80-*")
}

// TestLayoutBendsAroundNodes: a→b→c with a→c: the edge a→c crosses b's
// column in a row of its own, beside b rather than behind it.
func TestLayoutBendsAroundNodes(t *testing.T) {
	t.Parallel()
	pos, bends := dashboard.Layout(3, [][2]int{{0, 1}, {1, 2}, {0, 2}})
	require.Less(t, pos[0][0], pos[1][0])
	require.Less(t, pos[1][0], pos[2][0])
	require.Empty(t, bends[0])
	require.Empty(t, bends[1])
	require.Len(t, bends[2], 1)
	require.Equal(t, pos[1][0], bends[2][0][0], "the bend is in b's column")
	require.NotEqual(t, pos[1][1], bends[2][0][1], "in another row")
}

// TestGraphOfAFunction: a durable function's calls hang from its function
// step, which made them; many calls of one name are a group.
func TestGraphOfAFunction(t *testing.T) {
	t.Parallel()
	steps := []weft.TaskStep{{Name: "function", Kind: store.KindFunction, Handler: "shop/checkout@1"},
		{Name: "charge", Kind: store.KindCall, Handler: "shop/checkout@1"},
		{Name: "approval", Kind: store.KindSignal, Signal: "approval"}}
	for i := range 10 {
		steps = append(steps, weft.TaskStep{Name: fmt.Sprintf("poll[%d]", i+2), Kind: store.KindCall, Handler: "shop/checkout@1"})
	}
	nodes, edges := dashboard.GraphOf(steps)
	require.Equal(t, []string{"function", "charge", "approval", "poll[*] ×10"}, nodes)
	require.Equal(t, []string{"function → charge", "function → approval", "function → poll[*]"}, edges)
}
