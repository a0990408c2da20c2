package dashboard

import (
	"net/http"
	"sort"
	"strings"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/wire"
)

// This file holds the pages of what operators set and watch beside the
// tasks: namespaces with their pauses and limits, schedules, and the
// attention list.

type policiesData struct {
	Policies []store.Policy
	Limits   []store.LimitUsage
	Breakers []store.Breaker
	Changes  []store.PolicyChangeRecord
	// Rates are the rates in force: namespaces' (keyed by namespace) and
	// the buckets of templates' rates.
	Rates []wire.RateUsage
}

// policies shows what is paused and every limit with its current use, and
// the latest changes with who made them.
func (d *Dashboard) policies(r *http.Request) (string, any, error) {
	rep, err := d.engine.Policies(r.Context())
	if err != nil {
		return "", nil, err
	}
	changes, err := d.engine.PolicyChanges(r.Context(), 20)
	if err != nil {
		return "", nil, err
	}
	sort.Slice(rep.Policies, func(i, j int) bool { return rep.Policies[i].Target < rep.Policies[j].Target })
	return "Namespaces", policiesData{Policies: rep.Policies, Limits: rep.Limits, Breakers: rep.Breakers, Changes: changes, Rates: wire.PolicyReportOf(rep).RatesInForce()}, nil
}

// schedules lists every schedule with its last and next tick.
func (d *Dashboard) schedules(r *http.Request) (string, any, error) {
	list, err := d.engine.Schedules(r.Context(), weft.ScheduleFilter{})
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
	tasks, err := d.engine.List(r.Context(), weft.TaskFilter{Attention: true, Limit: pageSize + 1})
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
