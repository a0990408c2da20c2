package dashboard

import (
	"fmt"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/server"
)

// PagePatterns lists the ServeMux patterns of the dashboard's pages.
func PagePatterns() []string {
	var out []string
	for _, p := range (&Dashboard{}).registry() {
		out = append(out, p.Pattern)
	}
	return out
}

// Pages lists the dashboard's pages as a server's dashboard serves them.
func Pages(srv *server.Server) []Page {
	d, err := build(srv)
	if err != nil {
		panic(err)
	}
	var out []Page
	for _, p := range d.pages {
		out = append(out, p.Page)
	}
	return out
}

// GraphOf groups a task's steps as its page draws them, with the groups
// named in expand drawn one by one: each node as its key ("split") or,
// for a group, "key ×N" ("key +N" for what an expanded group leaves
// grouped), and each edge as "from → to".
func GraphOf(steps []weft.TaskStep, expand ...string) (nodes, edges []string) {
	expanded := map[string]bool{}
	for _, e := range expand {
		expanded[e] = true
	}
	gs, es, _ := drawnGraph(taskVertices(steps), expanded)
	for _, g := range gs {
		switch {
		case g.Rest:
			nodes = append(nodes, fmt.Sprintf("%s +%d", g.Key, len(g.Steps)))
		case g.Group:
			nodes = append(nodes, fmt.Sprintf("%s ×%d", g.Key, len(g.Steps)))
		default:
			nodes = append(nodes, g.Key)
		}
	}
	for _, e := range es {
		edges = append(edges, gs[e[0]].Key+" → "+gs[e[1]].Key)
	}
	return nodes, edges
}

// Layout places n nodes joined by edges (from, to) as the graphs do: each
// node's top left corner, and the bends of each edge that crosses
// columns.
func Layout(n int, edges [][2]int) (pos [][2]float64, bends [][][2]float64) {
	pos, bends, _, _ = layout(n, edges)
	return pos, bends
}

// ChartTicks are the labels of a chart's gridlines, bottom to top, for
// values up to maxV of a measure: "per-minute", "seconds" or "percent".
func ChartTicks(maxV float64, kind string) []string {
	m := map[string]measure{"per-minute": perMinute, "seconds": seconds, "percent": percent}[kind]
	step, _ := ticks(maxV, m)
	var out []string
	for i := range 5 {
		out = append(out, m.text(step*float64(i), step))
	}
	return out
}
