package dashboard

import (
	"encoding/json"
	"fmt"
	"html"
	"html/template"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/state"
)

type taskData struct {
	Task  *weft.Task
	Audit []weft.AuditEntry
	DAG   template.HTML
	Gantt template.HTML
	// Attempts are the timeline's bars, step by step, for its table.
	Attempts []attemptRow
	// Waiting lists the signals the task's steps wait for.
	Waiting []string
}

func (d *Dashboard) task(r *http.Request) (string, any, error) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id < 1 {
		return "", nil, badInput("%q is not a task id", r.PathValue("id"))
	}
	t, err := d.engine.Get(r.Context(), id)
	if err != nil {
		return "", nil, err
	}
	audit, err := d.engine.Audit(r.Context(), id)
	if err != nil {
		return "", nil, err
	}
	data := taskData{Task: t, Audit: audit}
	nodes := make([]node, len(t.Steps))
	for i, s := range t.Steps {
		nodes[i] = node{Name: s.Name, Label: s.Name, Sub: string(s.State), State: string(s.State), Deps: s.DependsOn, Link: "#step-" + strconv.FormatInt(s.ID, 10)}
		if s.Sub != "" {
			nodes[i].Sub += " · " + s.Sub
		}
		if s.Kind == "signal" && s.State == state.StepWaiting && s.Signal != "" {
			data.Waiting = append(data.Waiting, s.Signal)
		}
	}
	data.DAG = dagSVG(nodes, fmt.Sprintf("Graph of the %s of task %d by dependency, a column per depth, each coloured by its state: %s. The graph as a table, below, lists them.",
		plural(len(nodes), "step"), t.ID, stateCounts(t.Steps)))
	end := d.now()
	if t.FinishedAt != nil {
		end = *t.FinishedAt
	}
	bars := attempts(audit, end)
	for _, s := range t.Steps {
		for _, b := range bars[s.Name] {
			data.Attempts = append(data.Attempts, attemptRow{Step: s.Name, StepID: s.ID, Attempt: b.attempt, State: b.state,
				Start: "+" + short(b.start.Sub(t.CreatedAt)), Took: short(b.end.Sub(b.start))})
		}
	}
	data.Gantt = ganttSVG(t.Steps, bars, t.CreatedAt, end, fmt.Sprintf("Timeline of the %s of task %d's steps, from its creation over %s. The timeline as a table, below, lists them.",
		plural(len(data.Attempts), "attempt"), t.ID, short(end.Sub(t.CreatedAt))))
	return fmt.Sprintf("Task %d", t.ID), data, nil
}

// attemptRow is one attempt of the timeline's table.
type attemptRow struct {
	Step        string
	StepID      int64
	Attempt     int
	State       string
	Start, Took string
}

// stateCounts says how many steps are in each state, in the states' order:
// "3 completed, 1 failed".
func stateCounts(steps []weft.TaskStep) string {
	n := map[state.Step]int{}
	for _, s := range steps {
		n[s.State]++
	}
	var parts []string
	for _, st := range state.Steps {
		if n[st] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n[st], st))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// plural counts things: "1 step", "3 steps".
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// node is one box of a DAG drawing.
type node struct {
	Name, Label, Sub, State, Link string
	Deps                          []string
}

// dagSVG lays a DAG out by dependency depth: a column per depth, the steps
// of a column in definition order, edges from each dependency. It is named
// label, which says where its text alternative is (a table of the steps).
// Nodes with a link to their step make it a group of links, which screen
// readers can follow but the Tab key skips (the table's links are the
// same, without the fifty stops of a fan-out); without links it is an
// image.
func dagSVG(nodes []node, label string) template.HTML {
	const colW, rowH, boxW, boxH, pad = 190.0, 64.0, 160.0, 44.0, 12.0
	index := map[string]int{}
	for i, n := range nodes {
		index[n.Name] = i
	}
	depth := make([]int, len(nodes))
	done := make([]bool, len(nodes))
	var visit func(i, guard int) int
	visit = func(i, guard int) int {
		if done[i] || guard > len(nodes) {
			return depth[i]
		}
		dd := 0
		for _, dep := range nodes[i].Deps {
			if j, ok := index[dep]; ok && j != i {
				dd = max(dd, visit(j, guard+1)+1)
			}
		}
		depth[i], done[i] = dd, true
		return dd
	}
	rows := map[int]int{}
	pos := make([][2]float64, len(nodes))
	maxRow, maxDepth := 0, 0
	for i := range nodes {
		dd := visit(i, 0)
		pos[i] = [2]float64{pad + float64(dd)*colW, pad + float64(rows[dd])*rowH}
		rows[dd]++
		maxRow, maxDepth = max(maxRow, rows[dd]), max(maxDepth, dd)
	}
	w, h := pad*2+float64(maxDepth)*colW+boxW, pad*2+float64(maxRow-1)*rowH+boxH
	if len(nodes) == 0 {
		w, h = 200, 40
	}
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
	for i, n := range nodes {
		for _, dep := range n.Deps {
			j, ok := index[dep]
			if !ok {
				continue
			}
			x1, y1 := pos[j][0]+boxW, pos[j][1]+boxH/2
			x2, y2 := pos[i][0], pos[i][1]+boxH/2
			mx := (x1 + x2) / 2
			fmt.Fprintf(&b, `<path class="edge" d="M%.1f,%.1f C%.1f,%.1f %.1f,%.1f %.1f,%.1f" marker-end="url(#arrow)"/>`, x1, y1, mx, y1, mx, y2, x2, y2)
		}
	}
	for i, n := range nodes {
		x, y := pos[i][0], pos[i][1]
		open, closeTag := "", ""
		if n.Link != "" {
			open, closeTag = fmt.Sprintf(`<a href="%s" tabindex="-1">`, html.EscapeString(n.Link)), `</a>`
		}
		fmt.Fprintf(&b, `%s<g class="node st-%s" data-step="%s"><title>%s: %s</title><rect x="%.1f" y="%.1f" width="%.0f" height="%.0f" rx="6"/>`+
			`<text class="name" x="%.1f" y="%.1f">%s</text><text class="sub" x="%.1f" y="%.1f">%s</text></g>%s`,
			open, html.EscapeString(n.State), html.EscapeString(n.Name), html.EscapeString(n.Name), html.EscapeString(n.Sub),
			x, y, boxW, boxH, x+10, y+18, html.EscapeString(clip(n.Label, 22)), x+10, y+35, html.EscapeString(clip(n.Sub, 26)), closeTag)
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) //nolint:gosec // every text in it is escaped above
}

// bar is one attempt of a step on the timeline.
type bar struct {
	attempt    int
	start, end time.Time
	state      string
	open       bool
}

// attempts reads each step's attempts from the audit trail: an attempt
// runs from its move to running until the step's next move out of it.
func attempts(audit []weft.AuditEntry, now time.Time) map[string][]bar {
	out := map[string][]bar{}
	for _, e := range audit {
		if e.Step == "" {
			continue
		}
		bars := out[e.Step]
		if n := len(bars); n > 0 && bars[n-1].open && e.From == "running" {
			bars[n-1].end, bars[n-1].state, bars[n-1].open = e.At, e.To, false
		}
		if e.To == "running" {
			bars = append(bars, bar{attempt: e.Attempt, start: e.At, end: now, state: "running", open: true})
		}
		out[e.Step] = bars
	}
	return out
}

// ganttSVG draws each step's attempts (bars, from attempts) on one time
// axis, from the task's creation to its end (or now), as an image named
// label.
func ganttSVG(steps []weft.TaskStep, bars map[string][]bar, from, to time.Time, label string) template.HTML {
	const left, w, rowH, top = 170.0, 820.0, 22.0, 24.0
	span := to.Sub(from)
	if span <= 0 {
		span = time.Millisecond
	}
	h := top + float64(len(steps))*rowH + 8
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="gantt" viewBox="0 0 %.0f %.0f" width="%.0f" height="%.0f" role="img" aria-label="%s" xmlns="http://www.w3.org/2000/svg">`,
		w, h, w, h, html.EscapeString(label))
	pw := w - left - 30
	for i := 0; i <= 4; i++ {
		x := left + pw*float64(i)/4
		fmt.Fprintf(&b, `<line class="grid" x1="%.1f" x2="%.1f" y1="%.0f" y2="%.0f"/><text class="tick" x="%.1f" y="14" text-anchor="middle">+%s</text>`,
			x, x, top-4, h, x, html.EscapeString(short(span*time.Duration(i)/4)))
	}
	for i, s := range steps {
		y := top + float64(i)*rowH
		fmt.Fprintf(&b, `<text class="label" x="%.0f" y="%.1f" text-anchor="end">%s</text>`, left-8, y+14, html.EscapeString(clip(s.Name, 24)))
		for _, a := range bars[s.Name] {
			x1 := left + pw*float64(a.start.Sub(from))/float64(span)
			x2 := left + pw*float64(a.end.Sub(from))/float64(span)
			fmt.Fprintf(&b, `<rect class="bar st-%s" x="%.1f" y="%.1f" width="%.1f" height="%.0f" rx="3"><title>%s attempt %d: %s, %s</title></rect>`,
				html.EscapeString(a.state), x1, y+3, max(x2-x1, 2), rowH-8, html.EscapeString(s.Name), a.attempt, html.EscapeString(a.state), short(a.end.Sub(a.start)))
		}
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) //nolint:gosec // every text in it is escaped above
}

func init() {
	funcs["resolvable"] = func(s state.Step) bool {
		switch s {
		case state.StepPending, state.StepReady, state.StepWaiting, state.StepFailed, state.StepExpired:
			return true
		}
		return false
	}
	funcs["retryable"] = func(s state.Step) bool { return s == state.StepFailed || s == state.StepExpired }
	funcs["hasJSON"] = func(raw json.RawMessage) bool { return len(raw) > 0 && string(raw) != "null" }
}
