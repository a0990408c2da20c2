package dashboard

import (
	"fmt"
	"html"
	"html/template"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// This file draws a task's timeline: its steps' attempts on one time
// axis, a row per node of the graph.

// taskTimeline draws the task's timeline into data (the picture and its
// table): a row per node of the graph, up to ganttRows.
func (d *Dashboard) taskTimeline(data *taskData, audit []weft.AuditEntry, groups []gnode, nodes []node, stepLink func(*weft.TaskStep) string) {
	t := data.Task
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
		rows = append(rows, ganttRow{Label: nodes[n].Label, Bars: all, Group: true})
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
		data.Attempts = append(data.Attempts, attemptRow{Step: nodes[n].Label, Link: nodes[n].Link, Attempt: plural(len(all), "attempt"),
			Outcome: countsText(countStates(outcomes)), Start: "+" + short(first.Sub(t.CreatedAt)), Took: short(last.Sub(first))})
	}
	nAttempts := 0
	for _, bs := range bars {
		nAttempts += len(bs)
	}
	data.Gantt = ganttSVG(rows, t.CreatedAt, end, fmt.Sprintf("Timeline of the %s of task %d's steps, from its creation over %s, a row per node of the graph. The timeline as a table, below, lists them.",
		plural(nAttempts, "attempt"), t.ID, short(end.Sub(t.CreatedAt))))

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
	// Drawn across its box, never narrower than w CSS pixels (app.css), so
	// its text is never below 11 and 12 px: a narrow window scrolls the
	// timeline's box.
	const left, w, rowH, top, right = 180.0, 960.0, 22.0, 24.0, 30.0
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
		fmt.Fprintf(&b, `<text class="label" x="%.0f" y="%.1f" text-anchor="end">%s</text>`, left-8, y+14, html.EscapeString(clip(r.Label, 24)))
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
