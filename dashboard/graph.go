package dashboard

import (
	"cmp"
	"fmt"
	"html"
	"html/template"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// This file turns a task's steps (or a workflow's) into a graph that
// reads at any size: the items of a batch joined to the steps around them,
// and siblings that do the same thing between the same steps folded into
// one group node; then lays it out and draws it.

const (
	// groupOver is how many similar siblings (the same dependencies, the
	// same dependents, the same handler or template) are drawn one by one;
	// more are drawn as one group node.
	groupOver = 8
	// expandShown bounds the steps an expanded group draws one by one: the
	// rest stay a group, so that expanding a batch of 10,000 items keeps
	// the page small.
	expandShown = 200
	// drawnOver is how many nodes a graph may have before siblings are
	// grouped from two on (many small fan-outs).
	drawnOver = 400
)

// vertex is one step as the graph sees it.
type vertex struct {
	Name string
	// Kind is the step's kind (store.KindBatch, store.KindItem, ...).
	Kind string
	// Does is what the step runs: its template for a batch item, else its
	// handler (for a signal step, its signal).
	Does string
	Deps []string
	// Batch is the batch step that created an item ("" for other steps).
	Batch string
}

// batchOf returns the batch step that created an item step named
// "<batch>[<n>]", or "".
func batchOf(name, kind string) string {
	if kind != store.KindItem || !strings.HasSuffix(name, "]") {
		return ""
	}
	if i := strings.LastIndexByte(name, '['); i > 0 {
		return name[:i]
	}
	return ""
}

// gnode is a node of the grouped graph: one step, or a group of similar
// steps.
type gnode struct {
	// Key identifies the node: a step's name, or a group's glob of its
	// steps' names ("leaf-*", "split[*]"; "(handler)*" when they share
	// neither beginning nor end), which ?expand= names.
	Key string
	// Steps are the indexes of the node's steps, in definition order.
	Steps []int
	Group bool
	// Prefix, for a group, is what its steps' names begin with ("" when
	// they share nothing).
	Prefix string
	// Rest: the group is what an expanded group does not draw one by one
	// (beyond expandShown).
	Rest bool
	// Batch, for a group of batch items, is their batch step.
	Batch string
}

// groupGraph builds the graph to draw from steps in definition order.
// Each item of a batch depends on its batch step, and the batch step's
// dependents on each item (as the store runs them); the edge from the
// batch step to its dependents is then left out, since the items carry
// it. Siblings with the same dependencies, the same dependents, the same
// kind and the same handler or template are one group when there are more
// than over of them, unless expanded names the group's key. Nodes
// are in definition order, the items of a batch after their batch step.
// Edges
// are between node indexes, from a dependency to its dependent, each
// once. Opened lists the keys of expanded that are groups, in order.
func groupGraph(vs []vertex, expanded map[string]bool, over int) (nodes []gnode, edges [][2]int, opened []string) {
	index := make(map[string]int, len(vs))
	for i, v := range vs {
		index[v.Name] = i
	}
	deps := make([][]int, len(vs))
	items := map[int][]int{} // batch step → its items
	for i, v := range vs {
		for _, d := range v.Deps {
			if j, ok := index[d]; ok && j != i {
				deps[i] = append(deps[i], j)
			}
		}
		if j, ok := index[v.Batch]; ok && v.Batch != "" && j != i {
			deps[i] = append(deps[i], j)
			items[j] = append(items[j], i)
		}
	}
	// A dependent of a batch step waits for its items too. implied marks
	// the edge from the batch step, which the items carry.
	implied := map[[2]int]bool{}
	for i := range vs {
		for _, j := range deps[i] {
			if its := items[j]; len(its) > 0 && vs[i].Batch != vs[j].Name {
				implied[[2]int{j, i}] = true
			}
		}
	}
	for i := range vs {
		n := len(deps[i])
		for _, j := range deps[i][:n] {
			if vs[i].Batch != vs[j].Name {
				deps[i] = append(deps[i], items[j]...)
			}
		}
	}
	dependents := make([][]int, len(vs))
	for i := range vs {
		slices.Sort(deps[i])
		deps[i] = slices.Compact(deps[i])
		for _, j := range deps[i] {
			dependents[j] = append(dependents[j], i)
		}
	}

	// Siblings: the same kind, the same work, the same neighbours.
	buckets := map[string][]int{}
	var order []string
	var key strings.Builder
	for i, v := range vs {
		key.Reset()
		key.WriteString(v.Kind)
		key.WriteByte(0)
		key.WriteString(v.Does)
		key.WriteByte(0)
		for _, j := range deps[i] {
			key.WriteString(strconv.Itoa(j))
			key.WriteByte(',')
		}
		key.WriteByte(0)
		for _, j := range dependents[i] {
			key.WriteString(strconv.Itoa(j))
			key.WriteByte(',')
		}
		k := key.String()
		if _, ok := buckets[k]; !ok {
			order = append(order, k)
		}
		buckets[k] = append(buckets[k], i)
	}

	used := make(map[string]bool, len(vs))
	for _, v := range vs {
		used[v.Name] = true
	}
	single := func(i int) { nodes = append(nodes, gnode{Key: vs[i].Name, Steps: []int{i}}) }
	for _, k := range order {
		members := buckets[k]
		if len(members) <= over {
			for _, i := range members {
				single(i)
			}
			continue
		}
		g := gnode{Group: true, Batch: vs[members[0]].Batch}
		names := make([]string, len(members))
		for n, i := range members {
			names[n] = vs[i].Name
			if vs[i].Batch != g.Batch {
				g.Batch = ""
			}
		}
		// Not the tens of a number: leaf-01 … leaf-09 are "leaf-*".
		g.Prefix = strings.TrimRight(commonPrefix(names), "0123456789")
		g.Key = g.Prefix + "*" + commonSuffix(names, len(g.Prefix))
		if g.Key == "*" {
			g.Key = "(" + vs[members[0]].Does + ")*"
		}
		for n, k := 2, g.Key; used[g.Key]; n++ {
			g.Key = k + strconv.Itoa(n)
		}
		used[g.Key] = true
		if expanded[g.Key] {
			opened = append(opened, g.Key)
			shown := members[:min(len(members), expandShown)]
			for _, i := range shown {
				single(i)
			}
			if len(members) > len(shown) {
				g.Steps, g.Rest = members[len(shown):], true
				nodes = append(nodes, g)
			}
			continue
		}
		g.Steps = members
		nodes = append(nodes, g)
	}
	// In definition order, the items of a batch (stored after every step)
	// right after their batch step.
	rank := func(g gnode) float64 {
		i := g.Steps[0]
		if j, ok := index[vs[i].Batch]; ok && vs[i].Batch != "" {
			return float64(j) + 0.5
		}
		return float64(i)
	}
	slices.SortStableFunc(nodes, func(a, b gnode) int { return cmp.Compare(rank(a), rank(b)) })

	nodeOf := make([]int, len(vs))
	for n, g := range nodes {
		for _, i := range g.Steps {
			nodeOf[i] = n
		}
	}
	seen := map[[2]int]bool{}
	for i := range vs {
		for _, j := range deps[i] {
			e := [2]int{nodeOf[j], nodeOf[i]}
			if e[0] == e[1] || seen[e] || implied[[2]int{j, i}] {
				continue
			}
			seen[e] = true
			edges = append(edges, e)
		}
	}
	slices.SortFunc(edges, func(a, b [2]int) int {
		if c := cmp.Compare(a[1], b[1]); c != 0 {
			return c
		}
		return cmp.Compare(a[0], b[0])
	})
	return nodes, edges, opened
}

// drawnGraph is the graph to draw: siblings grouped beyond groupOver, or,
// when that leaves more than drawnOver nodes, from two on.
func drawnGraph(vs []vertex, expanded map[string]bool) ([]gnode, [][2]int, []string) {
	nodes, edges, opened := groupGraph(vs, expanded, groupOver)
	if len(nodes) > drawnOver {
		return groupGraph(vs, expanded, 1)
	}
	return nodes, edges, opened
}

// commonPrefix is what every name begins with (whole characters).
func commonPrefix(names []string) string {
	if len(names) == 0 {
		return ""
	}
	p := names[0]
	for _, n := range names[1:] {
		i := 0
		for i < len(p) && i < len(n) && p[i] == n[i] {
			i++
		}
		p = p[:i]
	}
	for len(p) > 0 && !utf8.ValidString(p) {
		p = p[:len(p)-1]
	}
	return p
}

// commonSuffix is what every name ends with, after its first skip bytes
// (whole characters).
func commonSuffix(names []string, skip int) string {
	if len(names) == 0 {
		return ""
	}
	p := names[0][skip:]
	for _, n := range names[1:] {
		n = n[skip:]
		i := 0
		for i < len(p) && i < len(n) && p[len(p)-1-i] == n[len(n)-1-i] {
			i++
		}
		p = p[len(p)-i:]
	}
	for len(p) > 0 && !utf8.ValidString(p) {
		p = p[1:]
	}
	return p
}

// node is one box of a DAG drawing.
type node struct {
	// Key identifies the node in the drawing (data-step).
	Key          string
	Label, Sub   string
	State, Title string
	Link         string
	// Counts, for a group, are its steps by state, drawn as a bar.
	Counts []stateCount
}

// stateCount is how many steps are in a state.
type stateCount struct {
	State state.Step
	N     int
}

// countStates counts states in the states' order.
func countStates(states []state.Step) []stateCount {
	n := map[state.Step]int{}
	for _, s := range states {
		n[s]++
	}
	var out []stateCount
	for _, st := range state.Steps {
		if n[st] > 0 {
			out = append(out, stateCount{st, n[st]})
		}
	}
	return out
}

// countsText says "48 completed, 2 failed".
func countsText(counts []stateCount) string {
	if len(counts) == 0 {
		return "none"
	}
	parts := make([]string, len(counts))
	for i, c := range counts {
		parts[i] = thousands(c.N) + " " + string(c.State)
	}
	return strings.Join(parts, ", ")
}

// urgency orders states by how much a group's colour should show them: a
// group with one failed step among many completed is drawn as failed.
var urgency = []state.Step{state.StepFailed, state.StepExpired, state.StepRunning, state.StepWaiting, state.StepReady, state.StepPending,
	state.StepCancelled, state.StepSkipped, state.StepResolved, state.StepCompleted}

// groupState is the state a group is coloured by: its most urgent one.
func groupState(counts []stateCount) string {
	for _, u := range urgency {
		for _, c := range counts {
			if c.State == u {
				return string(u)
			}
		}
	}
	return "pending"
}

// Box sizes of the DAG drawing.
const colW, rowH, boxW, boxH, pad = 190.0, 64.0, 160.0, 44.0, 14.0

// maxBends bounds the bends that edges crossing columns take (see
// layout); past it they are drawn straight.
const maxBends = 5000

// layout places the nodes by dependency depth: a column per depth (the
// longest path from a node without dependencies), each column ordered by
// where its nodes' dependencies are (their mean row, definition order
// breaking ties) and centred on the tallest. An edge that crosses columns
// takes a row in each column it crosses, a bend, so that it passes beside
// the nodes there rather than behind them. It returns each node's top
// left corner, each edge's bends (the top left corner of a box's place)
// and the drawing's size.
func layout(n int, edges [][2]int) (pos [][2]float64, bends [][][2]float64, w, h float64) {
	succs := make([][]int, n)
	indeg := make([]int, n)
	for _, e := range edges {
		succs[e[0]] = append(succs[e[0]], e[1])
		indeg[e[1]]++
	}
	depth := make([]int, n)
	queue := make([]int, 0, n)
	for i := range n {
		if indeg[i] == 0 {
			queue = append(queue, i)
		}
	}
	for q := 0; q < len(queue); q++ {
		i := queue[q]
		for _, j := range succs[i] {
			depth[j] = max(depth[j], depth[i]+1)
			if indeg[j]--; indeg[j] == 0 {
				queue = append(queue, j)
			}
		}
	}
	// The places: the nodes, then the bends of each edge, each with the
	// place before it on its edges.
	total := n
	for _, e := range edges {
		total += max(depth[e[1]]-depth[e[0]]-1, 0)
	}
	straight := total-n > maxBends
	preds := make([][]int, n, total)
	chains := make([][]int, len(edges))
	for k, e := range edges {
		prev := e[0]
		for d := depth[e[0]] + 1; !straight && d < depth[e[1]]; d++ {
			depth = append(depth, d)
			preds = append(preds, []int{prev})
			prev = len(preds) - 1
			chains[k] = append(chains[k], prev)
		}
		preds[e[1]] = append(preds[e[1]], prev)
	}
	maxDepth := 0
	for _, d := range depth {
		maxDepth = max(maxDepth, d)
	}
	cols := make([][]int, maxDepth+1)
	for i := range preds {
		cols[depth[i]] = append(cols[depth[i]], i)
	}
	maxRows := 0
	for _, col := range cols {
		maxRows = max(maxRows, len(col))
	}
	row := make([]float64, len(preds))
	for d, col := range cols {
		if d > 0 {
			bary := make(map[int]float64, len(col))
			for _, i := range col {
				sum := 0.0
				for _, p := range preds[i] {
					sum += row[p]
				}
				if len(preds[i]) > 0 {
					bary[i] = sum / float64(len(preds[i]))
				}
			}
			slices.SortStableFunc(col, func(a, b int) int { return cmp.Compare(bary[a], bary[b]) })
		}
		off := float64(maxRows-len(col)) / 2
		for r, i := range col {
			row[i] = off + float64(r)
		}
	}
	at := func(i int) [2]float64 { return [2]float64{pad + float64(depth[i])*colW, pad + row[i]*rowH} }
	pos = make([][2]float64, n)
	for i := range n {
		pos[i] = at(i)
	}
	bends = make([][][2]float64, len(edges))
	for k, chain := range chains {
		for _, i := range chain {
			bends[k] = append(bends[k], at(i))
		}
	}
	w, h = pad*2+float64(maxDepth)*colW+boxW, pad*2+float64(max(maxRows, 1)-1)*rowH+boxH
	if n == 0 {
		w, h = 200, 40
	}
	return pos, bends, w, h
}

// dagSVG draws a graph: nodes, and edges between their indexes from a
// dependency to its dependent. It is named label, which says where its
// text alternative is (a table of the nodes). Nodes with a link make it a
// group of links, which screen readers can follow but the Tab key skips
// (the table's links are the same, without the fifty stops of a fan-out);
// without links it is an image. A group node is drawn as a stack, with a
// bar of its steps' states.
func dagSVG(nodes []node, edges [][2]int, label string) template.HTML {
	pos, bends, w, h := layout(len(nodes), edges)
	var b strings.Builder
	role := "img"
	for _, n := range nodes {
		if n.Link != "" {
			role = "group"
		}
	}
	fmt.Fprintf(&b, `<svg class="dag" viewBox="0 0 %.0f %.0f" width="%.0f" height="%.0f" role="%s" aria-label="%s" xmlns="http://www.w3.org/2000/svg">`,
		w, h, w, h, role, html.EscapeString(label))
	b.WriteString(`<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" orient="auto"><path d="M0,0 L10,5 L0,10 z" class="arrowhead"/></marker></defs>`)
	for k, e := range edges {
		// From the dependency's right side through each bend (straight
		// across its box's place) to the dependent's left side.
		x1, y1 := pos[e[0]][0]+boxW, pos[e[0]][1]+boxH/2
		curve := func(x2, y2 float64) {
			mx := (x1 + x2) / 2
			fmt.Fprintf(&b, ` C%.1f,%.1f %.1f,%.1f %.1f,%.1f`, mx, y1, mx, y2, x2, y2)
		}
		fmt.Fprintf(&b, `<path class="edge" d="M%.1f,%.1f`, x1, y1)
		for _, p := range bends[k] {
			curve(p[0], p[1]+boxH/2)
			x1, y1 = p[0]+boxW, p[1]+boxH/2
			fmt.Fprintf(&b, ` L%.1f,%.1f`, x1, y1)
		}
		curve(pos[e[1]][0], pos[e[1]][1]+boxH/2)
		b.WriteString(`" marker-end="url(#arrow)"/>`)
	}
	for i, n := range nodes {
		x, y := pos[i][0], pos[i][1]
		open, closeTag := "", ""
		if n.Link != "" {
			open, closeTag = fmt.Sprintf(`<a href="%s" tabindex="-1">`, html.EscapeString(n.Link)), `</a>`
		}
		title := n.Title
		if title == "" {
			title = n.Key + ": " + n.Sub
		}
		class := "node st-" + n.State
		if n.Counts != nil {
			class += " group"
		}
		fmt.Fprintf(&b, `%s<g class="%s" data-step="%s"><title>%s</title>`, open, html.EscapeString(class), html.EscapeString(n.Key), html.EscapeString(title))
		if n.Counts != nil {
			for _, o := range []float64{8, 4} {
				fmt.Fprintf(&b, `<rect class="stack" x="%.1f" y="%.1f" width="%.0f" height="%.0f" rx="6"/>`, x+o, y-o, boxW, boxH)
			}
		}
		fmt.Fprintf(&b, `<rect class="box" x="%.1f" y="%.1f" width="%.0f" height="%.0f" rx="6"/>`, x, y, boxW, boxH)
		subY := 35.0
		if len(n.Counts) > 0 {
			subY = 31
		}
		fmt.Fprintf(&b, `<text class="name" x="%.1f" y="%.1f">%s</text><text class="sub" x="%.1f" y="%.1f">%s</text>`,
			x+10, y+17, html.EscapeString(clip(n.Label, 22)), x+10, y+subY, html.EscapeString(clip(n.Sub, 26)))
		if len(n.Counts) > 0 {
			total := 0
			for _, c := range n.Counts {
				total += c.N
			}
			bx, bw := x+10, boxW-20.0
			b.WriteString(`<g class="mix">`)
			for _, c := range n.Counts {
				sw := bw * float64(c.N) / float64(max(total, 1))
				fmt.Fprintf(&b, `<rect class="st-%s" x="%.1f" y="%.1f" width="%.1f" height="4"/>`, c.State, bx, y+boxH-9, max(sw, 1.5))
				bx += sw
			}
			b.WriteString(`</g>`)
		}
		fmt.Fprintf(&b, `</g>%s`, closeTag)
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) //nolint:gosec // every text in it is escaped above
}
