package dashboard

import (
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// The step list of a big task is collapsed: beyond collapseOver steps it
// shows the first summaryFirst and up to summaryUrgent failed, expired or
// running ones, with links to page through every step (stepPage a page)
// or filter them. The audit trail shows its latest auditShown entries, and
// the timeline its first ganttRows rows.
const (
	collapseOver  = 40
	summaryFirst  = 20
	summaryUrgent = 30
	stepPage      = 50
	auditShown    = 100
	ganttRows     = 300
)

type taskData struct {
	Task *weft.Task
	// Audit is the part of the audit trail shown, AuditTotal the entries
	// it was taken from (those of the filtered steps, or all).
	Audit      []weft.AuditEntry
	AuditTotal int
	DAG        template.HTML
	// Nodes are the graph's nodes, as its table; Groups are its groups,
	// with the links that expand or fold them.
	Nodes  []nodeRow
	Groups []groupLink
	Gantt  template.HTML
	// Attempts are the timeline's rows, for its table; GanttHidden counts
	// the graph's nodes past ganttRows that the timeline leaves out.
	Attempts    []attemptRow
	GanttHidden int
	GanttGroups bool
	// Waiting lists the signals the task's steps wait for.
	Waiting []string
	Steps   stepList
	// Signalled says whether the task has a step that waits for a signal
	// (a task has every step its workflow's version defines from its
	// submission on): only then does the page offer to send one.
	Signalled bool
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
// are expanded and which steps the list shows.
type taskView struct {
	id          int64
	expand      []string
	state, step string
	page        int
}

// url is the page with this view, then fragment ("#steps").
func (v taskView) url(fragment string) string {
	q := url.Values{}
	for _, e := range v.expand {
		q.Add("expand", e)
	}
	if v.state != "" {
		q.Set("state", v.state)
	}
	if v.step != "" {
		q.Set("step", v.step)
	}
	if v.page > 0 {
		q.Set("page", strconv.Itoa(v.page))
	}
	u := "/tasks/" + strconv.FormatInt(v.id, 10)
	if enc := q.Encode(); enc != "" {
		u += "?" + enc
	}
	return u + fragment
}

// filtered is the view with another step filter, on its first page.
func (v taskView) filtered(st, name string) taskView {
	v.state, v.step, v.page = st, name, 0
	return v
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
	q := r.URL.Query()
	v := taskView{id: id, state: q.Get("state"), step: strings.TrimSpace(q.Get("step"))}
	for _, e := range q["expand"] {
		if e != "" && !slices.Contains(v.expand, e) {
			v.expand = append(v.expand, e)
		}
	}
	if v.state != "" && !state.Step(v.state).Valid() {
		return v, badInput("state: %q is not a step state", v.state)
	}
	if p := q.Get("page"); p != "" {
		if v.page, err = strconv.Atoi(p); err != nil || v.page < 1 {
			return v, badInput("page: %q is not a page number", p)
		}
	}
	return v, nil
}

func (d *Dashboard) task(r *http.Request) (string, any, error) {
	v, err := parseTaskView(r)
	if err != nil {
		return "", nil, err
	}
	t, audit, err := d.in(r).Get(r.Context(), v.id)
	if err != nil {
		return "", nil, err
	}
	data := taskData{Task: t, Steps: listSteps(t.Steps, v)}
	shown := make(map[int64]bool, len(data.Steps.Shown))
	for _, s := range data.Steps.Shown {
		shown[s.ID] = true
	}
	// A step's details are on this page, or on the list filtered by its
	// name.
	stepLink := func(s *weft.TaskStep) string {
		frag := "#step-" + strconv.FormatInt(s.ID, 10)
		if shown[s.ID] {
			return frag
		}
		return v.filtered("", s.Name).url(frag)
	}
	for _, s := range t.Steps {
		data.Signalled = data.Signalled || s.Kind == store.KindSignal
		if s.Kind == store.KindSignal && s.State == state.StepWaiting && s.Signal != "" && !slices.Contains(data.Waiting, s.Signal) {
			data.Waiting = append(data.Waiting, s.Signal)
		}
	}

	groups, nodes := taskGraph(&data, v, stepLink)
	d.taskTimeline(&data, audit, groups, nodes, stepLink)

	// The audit trail: the filtered steps' entries, the latest of them.
	if v.step != "" {
		audit = slices.DeleteFunc(audit, func(e weft.AuditEntry) bool { return !containsFold(e.Step, v.step) })
	}
	data.AuditTotal = len(audit)
	data.Audit = audit[max(0, len(audit)-auditShown):]
	return fmt.Sprintf("Task %d", t.ID), data, nil
}

// taskVertices are a task's steps as the graph sees them: what a step
// does is its template (a batch item), its signal (a signal step) or its
// handler. A durable function's calls hang from its function step, which
// made them.
func taskVertices(steps []weft.TaskStep) []vertex {
	vs := make([]vertex, len(steps))
	caller := ""
	for _, s := range steps {
		if s.Kind == store.KindFunction {
			caller = s.Name
		}
	}
	for i, s := range steps {
		if caller != "" && s.Name != caller {
			s.DependsOn = []string{caller}
		}
		vs[i] = vertex{Name: s.Name, Kind: s.Kind, Does: s.Handler, Deps: s.DependsOn, Batch: batchOf(s.Name, s.Kind)}
		if s.Template != "" {
			vs[i].Does = s.Template
		}
		if s.Kind == store.KindSignal {
			vs[i].Does = s.Signal
		}
		if s.Kind == store.KindCall {
			// A call does what its name says: "poll[3]" what "poll" does.
			vs[i].Does, _, _ = strings.Cut(s.Name, "[")
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

func containsFold(s, sub string) bool {
	return strings.Contains(strings.ToLower(s), strings.ToLower(sub))
}

// taskGraph draws the task's graph into data (the picture, its table and
// its groups' links) and returns its nodes and their drawn form,
// which the timeline's rows follow.
func taskGraph(data *taskData, v taskView, stepLink func(*weft.TaskStep) string) ([]gnode, []node) {
	t := data.Task
	vs := taskVertices(t.Steps)
	expanded := map[string]bool{}
	for _, e := range v.expand {
		expanded[e] = true
	}
	groups, edges, opened := drawnGraph(vs, expanded)
	nodes := make([]node, len(groups))
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
		if g.Prefix != "" {
			list = v.filtered("", g.Prefix).url("#steps")
		}
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
		data.Nodes = append(data.Nodes, nodeRow{Label: label, Link: link, Group: true, Counts: countsText(counts), ListLink: list})
	}
	for _, e := range opened {
		data.Groups = append(data.Groups, groupLink{Label: e, Link: v.expanding(e, false).url("#dag"), Expanded: true})
	}
	preds := make([][]string, len(groups))
	for _, e := range edges {
		preds[e[1]] = append(preds[e[1]], nodes[e[0]].Label)
	}
	for n := range data.Nodes {
		data.Nodes[n].Deps = strings.Join(preds[n], ", ")
	}
	data.DAG = dagSVG(nodes, edges, fmt.Sprintf("Graph of the %s of task %d by dependency, a column per depth, each coloured by its state (%s), %s. The graph as a table, below, lists them.",
		plural(len(t.Steps), "step"), t.ID, stateCounts(t.Steps), drawnAs(len(t.Steps), len(nodes))))

	return groups, nodes
}
