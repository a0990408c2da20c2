package dashboard

import (
	"encoding/json"
	"fmt"
	"html"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

type taskData struct {
	Task  *weft.Task
	Audit []weft.AuditEntry
	DAG   template.HTML
	// Nodes are the graph's nodes, as its table; Groups are its groups,
	// with the links that expand or fold them.
	Nodes  []nodeRow
	Groups []groupLink
	Gantt  template.HTML
	// Attempts are the timeline's bars, step by step, for its table.
	Attempts []attemptRow
	// Waiting lists the signals the task's steps wait for.
	Waiting []string
}

// nodeRow is one node of the graph as a table.
type nodeRow struct {
	Label, Link string
	// A step's state and sub-state; a group's states counted, and the
	// link to the list of its steps.
	State    state.Step
	Sub      string
	Group    bool
	Counts   string
	Deps     string
	ListLink string
}

// groupLink is a group of the graph: Link expands it (or, Expanded,
// folds it again).
type groupLink struct {
	Label, Link string
	Expanded    bool
}

// taskView is what a task's page was asked for: which groups of the graph
// are expanded.
type taskView struct {
	id     int64
	expand []string
}

// url is the page with this view, then fragment ("#dag").
func (v taskView) url(fragment string) string {
	q := url.Values{}
	for _, e := range v.expand {
		q.Add("expand", e)
	}
	u := "/tasks/" + strconv.FormatInt(v.id, 10)
	if enc := q.Encode(); enc != "" {
		u += "?" + enc
	}
	return u + fragment
}

func (v taskView) expanding(key string, on bool) taskView {
	v.expand = slices.DeleteFunc(slices.Clone(v.expand), func(e string) bool { return e == key })
	if on {
		v.expand = append(v.expand, key)
	}
	return v
}

func parseTaskView(r *http.Request) (taskView, error) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id < 1 {
		return taskView{}, badInput("%q is not a task id", r.PathValue("id"))
	}
	v := taskView{id: id}
	for _, e := range r.URL.Query()["expand"] {
		if e != "" && !slices.Contains(v.expand, e) {
			v.expand = append(v.expand, e)
		}
	}
	return v, nil
}

func (d *Dashboard) task(r *http.Request) (string, any, error) {
	v, err := parseTaskView(r)
	if err != nil {
		return "", nil, err
	}
	t, err := d.engine.Get(r.Context(), v.id)
	if err != nil {
		return "", nil, err
	}
	audit, err := d.engine.Audit(r.Context(), v.id)
	if err != nil {
		return "", nil, err
	}
	data := taskData{Task: t, Audit: audit}
	stepLink := func(s *weft.TaskStep) string { return "#step-" + strconv.FormatInt(s.ID, 10) }
	for _, s := range t.Steps {
		if s.Kind == store.KindSignal && s.State == state.StepWaiting && s.Signal != "" && !slices.Contains(data.Waiting, s.Signal) {
			data.Waiting = append(data.Waiting, s.Signal)
		}
	}

	// The graph.
	vs := taskVertices(t.Steps)
	expanded := map[string]bool{}
	for _, e := range v.expand {
		expanded[e] = true
	}
	groups, edges, opened := drawnGraph(vs, expanded)
	nodes := make([]node, len(groups))
	labels := make([]string, len(groups))
	for n, g := range groups {
		s := &t.Steps[g.Steps[0]]
		if !g.Group {
			sub := string(s.State)
			switch {
			case s.Kind == store.KindSignal && s.State == state.StepWaiting && s.Signal != "":
				sub = "waiting for " + s.Signal
			case s.Sub != "":
				sub += " · " + s.Sub
			}
			nodes[n] = node{Key: s.Name, Label: s.Name, Sub: sub, State: string(s.State), Link: stepLink(s)}
			labels[n] = s.Name
			data.Nodes = append(data.Nodes, nodeRow{Label: s.Name, Link: nodes[n].Link, State: s.State, Sub: s.Sub})
			continue
		}
		states := make([]state.Step, len(g.Steps))
		for k, i := range g.Steps {
			states[k] = t.Steps[i].State
		}
		counts := countStates(states)
		base, what := g.Key, "steps running "+s.Handler
		if g.Batch != "" {
			base, what = s.Template, fmt.Sprintf("items of batch %s, each running template %s", g.Batch, s.Template)
		}
		label := base + " ×" + thousands(len(g.Steps))
		title := fmt.Sprintf("%s … %s: %s %s: %s.", s.Name, t.Steps[g.Steps[len(g.Steps)-1]].Name, thousands(len(g.Steps)), what, countsText(counts))
		var link, list string
		if g.Rest {
			label = fmt.Sprintf("%s +%s more", base, thousands(len(g.Steps)))
			title = fmt.Sprintf("%s more %s (only the first %d are drawn one by one): %s.", thousands(len(g.Steps)), what, expandShown, countsText(counts))
			link = list
		} else {
			link = v.expanding(g.Key, true).url("#dag")
			title += " Select to draw them one by one."
			data.Groups = append(data.Groups, groupLink{Label: label, Link: link})
		}
		nodes[n] = node{Key: g.Key, Label: label, Sub: countsText(counts), State: groupState(counts), Title: title, Link: link, Counts: counts}
		labels[n] = label
		data.Nodes = append(data.Nodes, nodeRow{Label: label, Link: link, Group: true, Counts: countsText(counts), ListLink: list})
	}
	for _, e := range opened {
		data.Groups = append(data.Groups, groupLink{Label: e, Link: v.expanding(e, false).url("#dag"), Expanded: true})
	}
	preds := make([][]string, len(groups))
	for _, e := range edges {
		preds[e[1]] = append(preds[e[1]], labels[e[0]])
	}
	for n := range data.Nodes {
		data.Nodes[n].Deps = strings.Join(preds[n], ", ")
	}
	data.DAG = dagSVG(nodes, edges, fmt.Sprintf("Graph of the %s of task %d by dependency, a column per depth, each coloured by its state (%s), %s. The graph as a table, below, lists them.",
		plural(len(t.Steps), "step"), t.ID, stateCounts(t.Steps), drawnAs(len(t.Steps), len(nodes))))

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

// taskVertices are a task's steps as the graph sees them: what a step
// does is its template (a batch item), its signal (a signal step) or its
// handler.
func taskVertices(steps []weft.TaskStep) []vertex {
	vs := make([]vertex, len(steps))
	for i, s := range steps {
		vs[i] = vertex{Name: s.Name, Kind: s.Kind, Does: s.Handler, Deps: s.DependsOn, Batch: batchOf(s.Name, s.Kind)}
		if s.Template != "" {
			vs[i].Does = s.Template
		}
		if s.Kind == store.KindSignal {
			vs[i].Does = s.Signal
		}
	}
	return vs
}

// drawnAs says how the graph draws the steps: "each drawn as a node", or
// "drawn as 5 nodes, similar steps grouped".
func drawnAs(steps, nodes int) string {
	if steps == nodes {
		return "each drawn as a node"
	}
	return fmt.Sprintf("drawn as %s, similar steps grouped", plural(nodes, "node"))
}

func stepStates(steps []weft.TaskStep) []state.Step {
	out := make([]state.Step, len(steps))
	for i, s := range steps {
		out[i] = s.State
	}
	return out
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
	return countsText(countStates(stepStates(steps)))
}

// plural counts things: "1 step", "3 steps".
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%s %ss", thousands(n), thing)
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
