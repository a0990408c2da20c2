package dashboard

import (
	"net/http"
	"sort"
	"strings"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/wire"
)

// This file holds the pages of what operators set and watch beside the
// tasks: namespaces with their pauses and limits, schedules, and the
// attention list.

type policiesData struct {
	// Namespaces lists every namespace a workflow is registered in or a
	// policy names, with what it holds.
	Namespaces []namespaceRow
	Policies   []store.Policy
	Limits     []store.LimitUsage
	Breakers   []store.Breaker
	Changes    []store.PolicyChangeRecord
	// Rates are the rates in force: namespaces' (keyed by namespace) and
	// the buckets of templates' rates.
	Rates []wire.RateUsage
}

// policies shows what is paused and every limit with its current use, and
// the latest changes with who made them.
func (d *Dashboard) policies(r *http.Request) (string, any, error) {
	ctx := r.Context()
	rep, err := d.in(r).Policies(ctx)
	if err != nil {
		return "", nil, err
	}
	changes, err := d.in(r).PolicyChanges(ctx, 20)
	if err != nil {
		return "", nil, err
	}
	wfs, err := d.in(r).Workflows(ctx)
	if err != nil {
		return "", nil, err
	}
	depth, err := d.in(r).QueueDepth(ctx)
	if err != nil {
		return "", nil, err
	}
	sort.Slice(rep.Policies, func(i, j int) bool { return rep.Policies[i].Target < rep.Policies[j].Target })
	return "Namespaces", policiesData{Namespaces: namespaceRows(wfs, depth, rep.Policies), Policies: rep.Policies, Limits: rep.Limits,
		Breakers: rep.Breakers, Changes: changes, Rates: wire.PolicyReportOf(rep).RatesInForce()}, nil
}

// namespaceRow is one namespace: its workflows, its unfinished steps by
// state, and whether a policy pauses it.
type namespaceRow struct {
	Name                             string
	Workflows                        int
	Pending, Ready, Running, Waiting int
	Paused                           bool
	Concurrency                      int
}

// namespaceRows lists the namespaces that workflows are registered in, that
// hold unfinished steps or that a policy names, by name.
func namespaceRows(wfs []weft.WorkflowRecord, depth []store.QueueCount, policies []store.Policy) []namespaceRow {
	rows := map[string]*namespaceRow{}
	row := func(ns string) *namespaceRow {
		if rows[ns] == nil {
			rows[ns] = &namespaceRow{Name: ns}
		}
		return rows[ns]
	}
	seen := map[string]bool{}
	for _, w := range wfs {
		if key := w.Namespace + "/" + w.Name; !seen[key] {
			seen[key] = true
			row(w.Namespace).Workflows++
		}
	}
	for _, c := range depth {
		r := row(c.Namespace)
		switch c.State {
		case state.StepPending:
			r.Pending += c.Count
		case state.StepReady:
			r.Ready += c.Count
		case state.StepRunning:
			r.Running += c.Count
		case state.StepWaiting:
			r.Waiting += c.Count
		}
	}
	for _, p := range policies {
		if p.Target == "*" || strings.Contains(p.Target, "/") {
			continue // all work, or one workflow: not a namespace's row
		}
		r := row(p.Target)
		r.Paused, r.Concurrency = p.Paused, p.Concurrency
	}
	out := make([]namespaceRow, 0, len(rows))
	for _, r := range rows {
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// schedules lists every schedule with its last and next tick.
func (d *Dashboard) schedules(r *http.Request) (string, any, error) {
	list, err := d.in(r).Schedules(r.Context(), weft.ScheduleFilter{})
	if err != nil {
		return "", nil, err
	}
	sort.Slice(list, func(i, j int) bool { return list[i].ScheduleKey.String() < list[j].ScheduleKey.String() })
	return "Schedules", list, nil
}

type attentionData struct {
	Tasks []weft.Task
	More  bool
}

// attention lists the tasks that need a person, with the reasons.
func (d *Dashboard) attention(r *http.Request) (string, any, error) {
	tasks, err := d.in(r).List(r.Context(), weft.TaskFilter{Attention: true, Limit: pageSize + 1})
	if err != nil {
		return "", nil, err
	}
	data := attentionData{Tasks: tasks}
	if len(tasks) > pageSize {
		data.Tasks, data.More = tasks[:pageSize], true
	}
	return "Attention", data, nil
}

// handlerList shows the handlers an engine or worker advertises.
func handlerList(hs []string) string { return strings.Join(hs, ", ") }
