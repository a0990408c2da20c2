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

// stepList is the part of the task's steps the page lists, and how to
// reach the others.
type stepList struct {
	Shown []weft.TaskStep
	// Total is the task's steps, Matching those the filter selects.
	Total, Matching int
	// Filter: a state, and text the name contains.
	State, Name string
	// Expand are the graph's expanded groups, kept by the filter's form.
	Expand []string
	// Summary: the list is collapsed (no filter, no page): the first
	// First steps and the urgent ones; Urgent counts those shown past
	// the first.
	Summary bool
	First   int
	Urgent  int
	// Page of Pages (1-based), with the links around it.
	Page, Pages       int
	Prev, Next, Clear string
	All               string
	// States are the task's steps by state (every state, perhaps none),
	// each with its filter link.
	States []stateLink
}

type stateLink struct {
	State  state.Step
	N      int
	Link   string
	Active bool
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
	t, err := d.engine.Get(r.Context(), v.id)
	if err != nil {
		return "", nil, err
	}
	audit, err := d.engine.Audit(r.Context(), v.id)
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

	// The timeline: a row per node of the graph.
	end := d.now()
	if t.FinishedAt != nil {
		end = *t.FinishedAt
	}
	waits := map[string]bool{}
	for _, s := range t.Steps {
		if s.Kind == store.KindSignal {
			waits[s.Name] = true
		}
	}
	bars := attempts(audit, end, waits)
	var rows []ganttRow
	for n, g := range groups {
		if n == ganttRows {
			data.GanttHidden = len(groups) - n
			break
		}
		s := &t.Steps[g.Steps[0]]
		if !g.Group {
			rows = append(rows, ganttRow{Label: s.Name, Bars: bars[s.Name]})
			for _, b := range bars[s.Name] {
				n := strconv.Itoa(b.attempt)
				if b.wait {
					n = "wait"
				}
				data.Attempts = append(data.Attempts, attemptRow{Step: s.Name, Link: stepLink(s), Attempt: n, State: b.state,
					Start: "+" + short(b.start.Sub(t.CreatedAt)), Took: short(b.end.Sub(b.start))})
			}
			continue
		}
		var all []bar
		for _, i := range g.Steps {
			all = append(all, bars[t.Steps[i].Name]...)
		}
		rows = append(rows, ganttRow{Label: labels[n], Bars: all, Group: true})
		data.GanttGroups = true
		if len(all) == 0 {
			continue
		}
		first, last := all[0].start, all[0].end
		outcomes := make([]state.Step, len(all))
		for k, b := range all {
			first, last = minTime(first, b.start), maxTime(last, b.end)
			outcomes[k] = state.Step(b.state)
		}
		data.Attempts = append(data.Attempts, attemptRow{Step: labels[n], Link: nodes[n].Link, Attempt: plural(len(all), "attempt"),
			Outcome: countsText(countStates(outcomes)), Start: "+" + short(first.Sub(t.CreatedAt)), Took: short(last.Sub(first))})
	}
	nAttempts := 0
	for _, bs := range bars {
		nAttempts += len(bs)
	}
	data.Gantt = ganttSVG(rows, t.CreatedAt, end, fmt.Sprintf("Timeline of the %s of task %d's steps, from its creation over %s, a row per node of the graph. The timeline as a table, below, lists them.",
		plural(nAttempts, "attempt"), t.ID, short(end.Sub(t.CreatedAt))))

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

func containsFold(s, sub string) bool {
	return strings.Contains(strings.ToLower(s), strings.ToLower(sub))
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// listSteps picks the steps the list shows: every one of a small task;
// of a big one with no filter, the first summaryFirst and the failed,
// expired or running ones; else a page of those the filter selects.
func listSteps(steps []weft.TaskStep, v taskView) stepList {
	l := stepList{Total: len(steps), First: summaryFirst, State: v.state, Name: v.step, Expand: v.expand, Page: v.page}
	n := map[state.Step]int{}
	for _, s := range steps {
		n[s.State]++
	}
	for _, st := range state.Steps {
		l.States = append(l.States, stateLink{State: st, N: n[st], Link: v.filtered(string(st), v.step).url("#steps"), Active: string(st) == v.state})
	}
	if v.state != "" || v.step != "" {
		l.Clear = v.filtered("", "").url("#steps")
	}
	if len(steps) <= collapseOver && v.state == "" && v.step == "" {
		l.Shown, l.Matching = steps, len(steps)
		return l
	}
	if v.state == "" && v.step == "" && v.page == 0 {
		l.Summary, l.Matching = true, len(steps)
		l.Shown = slices.Clone(steps[:summaryFirst])
		for _, s := range steps[summaryFirst:] {
			if l.Urgent < summaryUrgent && (s.State == state.StepFailed || s.State == state.StepExpired || s.State == state.StepRunning) {
				l.Shown = append(l.Shown, s)
				l.Urgent++
			}
		}
		pv := v
		pv.page = 1
		l.All = pv.url("#steps")
		return l
	}
	var match []weft.TaskStep
	for _, s := range steps {
		if (v.state == "" || string(s.State) == v.state) && (v.step == "" || containsFold(s.Name, v.step)) {
			match = append(match, s)
		}
	}
	l.Matching = len(match)
	l.Pages = max(1, (len(match)+stepPage-1)/stepPage)
	l.Page = min(max(v.page, 1), l.Pages)
	l.Shown = match[(l.Page-1)*stepPage : min(len(match), l.Page*stepPage)]
	if l.Page > 1 {
		pv := v
		pv.page = l.Page - 1
		l.Prev = pv.url("#steps")
	}
	if l.Page < l.Pages {
		pv := v
		pv.page = l.Page + 1
		l.Next = pv.url("#steps")
	}
	return l
}

func stepStates(steps []weft.TaskStep) []state.Step {
	out := make([]state.Step, len(steps))
	for i, s := range steps {
		out[i] = s.State
	}
	return out
}

// attemptRow is one row of the timeline's table: an attempt of a step, or
// every attempt of a group's steps (Outcome counts them).
type attemptRow struct {
	Step, Link  string
	Attempt     string
	State       string
	Outcome     string
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
	// wait: the bar is a signal step's wait for its signal.
	wait bool
}

// attempts reads each step's attempts from the audit trail: an attempt
// runs from its move to running until the step's next move out of it. A
// step named in waits (a signal step) has waits instead: from its move to
// waiting until its next move out of it.
func attempts(audit []weft.AuditEntry, now time.Time, waits map[string]bool) map[string][]bar {
	out := map[string][]bar{}
	for _, e := range audit {
		if e.Step == "" {
			continue
		}
		runs := string(state.StepRunning)
		if waits[e.Step] {
			runs = string(state.StepWaiting)
		}
		bars := out[e.Step]
		if n := len(bars); n > 0 && bars[n-1].open && e.From == runs {
			bars[n-1].end, bars[n-1].state, bars[n-1].open = e.At, e.To, false
		}
		if e.To == runs {
			bars = append(bars, bar{attempt: e.Attempt, start: e.At, end: now, state: runs, open: true, wait: waits[e.Step]})
		}
		out[e.Step] = bars
	}
	return out
}

// ganttRow is one row of the timeline: a step's attempts, or (Group)
// every attempt of a group's steps.
type ganttRow struct {
	Label string
	Bars  []bar
	Group bool
}

// ganttBuckets is how many slices of time a group's row counts its
// running attempts in.
const ganttBuckets = 160

// ganttSVG draws the rows on one time axis, from the task's creation to
// its end (or now), as an image named label: a step's attempts as bars; a
// group's as a band from its first start to its last end, with how many
// of its steps ran in each slice of time, by how each attempt ended.
func ganttSVG(rows []ganttRow, from, to time.Time, label string) template.HTML {
	const left, w, rowH, top, right = 200.0, 1200.0, 22.0, 24.0, 30.0
	span := to.Sub(from)
	if span <= 0 {
		span = time.Millisecond
	}
	h := top + float64(len(rows))*rowH + 8
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="gantt" viewBox="0 0 %.0f %.0f" width="%.0f" height="%.0f" role="img" aria-label="%s" xmlns="http://www.w3.org/2000/svg">`,
		w, h, w, h, html.EscapeString(label))
	pw := w - left - right
	xOf := func(t time.Time) float64 { return left + pw*float64(t.Sub(from))/float64(span) }
	for i := 0; i <= 6; i++ {
		x := left + pw*float64(i)/6
		fmt.Fprintf(&b, `<line class="grid" x1="%.1f" x2="%.1f" y1="%.0f" y2="%.0f"/><text class="tick" x="%.1f" y="14" text-anchor="middle">+%s</text>`,
			x, x, top-4, h, x, html.EscapeString(short(span*time.Duration(i)/6)))
	}
	for i, r := range rows {
		y := top + float64(i)*rowH
		fmt.Fprintf(&b, `<text class="label" x="%.0f" y="%.1f" text-anchor="end">%s</text>`, left-8, y+14, html.EscapeString(clip(r.Label, 26)))
		if !r.Group {
			for _, a := range r.Bars {
				x1, x2 := xOf(a.start), xOf(a.end)
				what := fmt.Sprintf("attempt %d", a.attempt)
				if a.wait {
					what = "wait for its signal"
				}
				fmt.Fprintf(&b, `<rect class="bar st-%s" x="%.1f" y="%.1f" width="%.1f" height="%.0f" rx="3"><title>%s %s: %s, %s</title></rect>`,
					html.EscapeString(a.state), x1, y+3, max(x2-x1, 2), rowH-8, html.EscapeString(r.Label), what, html.EscapeString(a.state), short(a.end.Sub(a.start)))
			}
			continue
		}
		if len(r.Bars) == 0 {
			continue
		}
		// Per slice of time, the attempts running in it by outcome.
		first, last := r.Bars[0].start, r.Bars[0].end
		per := map[string][]int{}
		peak := make([]int, ganttBuckets)
		for _, a := range r.Bars {
			first, last = minTime(first, a.start), maxTime(last, a.end)
			s, e := bucket(a.start, from, span), bucket(a.end, from, span)
			if per[a.state] == nil {
				per[a.state] = make([]int, ganttBuckets)
			}
			for k := s; k <= e; k++ {
				per[a.state][k]++
				peak[k]++
			}
		}
		most := slices.Max(peak)
		x1, x2 := xOf(first), xOf(last)
		fmt.Fprintf(&b, `<rect class="band" x="%.1f" y="%.1f" width="%.1f" height="%.0f" rx="3"><title>%s: %s from +%s to +%s, at most %d running at once</title></rect>`,
			x1, y+2, max(x2-x1, 2), rowH-4, html.EscapeString(r.Label), plural(len(r.Bars), "attempt"), short(first.Sub(from)), short(last.Sub(from)), most)
		bw := pw / ganttBuckets
		base := make([]float64, ganttBuckets)
		for _, st := range state.Steps {
			counts := per[string(st)]
			if counts == nil {
				continue
			}
			for k, c := range counts {
				if c == 0 {
					continue
				}
				bh := (rowH - 6) * float64(c) / float64(most)
				fmt.Fprintf(&b, `<rect class="bar st-%s" x="%.1f" y="%.1f" width="%.1f" height="%.1f"/>`, st, left+bw*float64(k), y+rowH-3-base[k]-bh, bw, bh)
				base[k] += bh
			}
		}
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) //nolint:gosec // every text in it is escaped above
}

// bucket is the slice of time, of ganttBuckets from from over span, that t
// falls in.
func bucket(t, from time.Time, span time.Duration) int {
	return min(max(int(float64(t.Sub(from))/float64(span)*ganttBuckets), 0), ganttBuckets-1)
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
	funcs["batchOf"] = batchOf
	funcs["thousands"] = thousands
	funcs["stepPage"] = func() int { return stepPage }
	funcs["hasJSON"] = func(raw json.RawMessage) bool { return len(raw) > 0 && string(raw) != "null" }
}
