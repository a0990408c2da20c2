package dashboard

import (
	"fmt"
	"slices"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/state"
)

// This file picks the steps a task's page lists: every one of a small
// task; a summary, a filter or a page of a big one.

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
