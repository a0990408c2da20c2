package dashboard

import (
	"encoding/json"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/internal/taskview"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/wire"
	"github.com/weftrun/weft/workflow"
)

// pageSize is how many tasks a page of the list shows.
const pageSize = 50

type tasksData struct {
	Tasks []weft.Task
	// Now says where each unfinished task shown stands, by task id.
	Now        map[int64]*taskview.Standing
	States     []state.Task
	Namespaces []string
	Workflows  []string
	Filter     taskQuery
	// Next is the query of the next page, "" on the last one.
	Next string
	// First is the query of the first page, "" on it.
	First string
	// CancelIDs and RetryIDs are the ids of the tasks shown that the bulk
	// actions apply to.
	CancelIDs, RetryIDs string
	Cancellable         int
	Retryable           int
	Searched            bool
	// Bulk is the filter of the page, as the body of the bulk endpoints
	// (JSON), for the actions on every matching task; "" with no filter.
	Bulk string
}

// taskQuery is the list's filter as the page's form sends it.
type taskQuery struct {
	State, Namespace, Workflow, From, To, Q, Tag, Schedule string
	Cursor                                                 int64
}

func (q taskQuery) values() url.Values {
	v := url.Values{}
	for k, s := range map[string]string{"state": q.State, "namespace": q.Namespace, "workflow": q.Workflow, "from": q.From, "to": q.To, "q": q.Q, "tag": q.Tag, "schedule": q.Schedule} {
		if s != "" {
			v.Set(k, s)
		}
	}
	return v
}

// timeLayouts are what the time range fields accept: the browser's
// datetime-local value, or RFC 3339.
var timeLayouts = []string{"2006-01-02T15:04", "2006-01-02T15:04:05", time.RFC3339}

func parseWhen(field, v string) (time.Time, error) {
	for _, l := range timeLayouts {
		if t, err := time.ParseInLocation(l, v, time.UTC); err == nil {
			return t, nil
		}
	}
	return time.Time{}, badInput("%s: %q is not a time (YYYY-MM-DDTHH:MM, UTC)", field, v)
}

func (d *Dashboard) tasks(r *http.Request) (string, any, error) {
	ctx := r.Context()
	v := r.URL.Query()
	q := taskQuery{State: v.Get("state"), Namespace: v.Get("namespace"), Workflow: v.Get("workflow"), From: v.Get("from"), To: v.Get("to"),
		Q: strings.TrimSpace(v.Get("q")), Tag: strings.TrimSpace(v.Get("tag")),
		Schedule: strings.TrimSpace(v.Get("schedule"))}
	f := weft.TaskFilter{Namespace: q.Namespace, Workflow: q.Workflow, State: state.Task(q.State), Schedule: q.Schedule, Limit: pageSize, Active: true}
	if f.State != "" && !f.State.Valid() {
		return "", nil, badInput("state: %q is not a task state", q.State)
	}
	var err error
	if f.Namespace, f.Workflow, err = workflow.ParseFilter(q.Namespace, q.Workflow); err != nil {
		return "", nil, badInput("%v", err)
	}
	if q.Tag != "" {
		k, val, err := store.ParseTag(q.Tag)
		if err != nil {
			return "", nil, badInput("tag: %q: want KEY=VALUE", q.Tag)
		}
		f.Tags = map[string]string{k: val}
	}
	if c := v.Get("cursor"); c != "" {
		n, err := strconv.ParseInt(c, 10, 64)
		if err != nil || n < 1 {
			return "", nil, badInput("cursor: %q is not a cursor from an earlier page", c)
		}
		q.Cursor, f.BeforeID = n, n
	}
	if q.From != "" {
		if f.CreatedAfter, err = parseWhen("from", q.From); err != nil {
			return "", nil, err
		}
	}
	if q.To != "" {
		if f.CreatedBefore, err = parseWhen("to", q.To); err != nil {
			return "", nil, err
		}
	}
	data := tasksData{States: state.Tasks, Filter: q}
	if q.Q == "" && (q.State != "" || q.Namespace != "" || q.Workflow != "" || q.Tag != "" || q.Schedule != "" || q.From != "" || q.To != "") {
		bf := wire.TaskFilter{Namespace: q.Namespace, Workflow: q.Workflow, State: q.State, Tags: f.Tags, Schedule: q.Schedule}
		if !f.CreatedAfter.IsZero() {
			bf.CreatedAfter = &f.CreatedAfter
		}
		if !f.CreatedBefore.IsZero() {
			bf.CreatedBefore = &f.CreatedBefore
		}
		b, err := json.Marshal(wire.BulkRequest{Filter: bf})
		if err != nil {
			return "", nil, err
		}
		data.Bulk = string(b)
	}
	if wfs, err := d.in(r).Workflows(ctx); err == nil {
		seenNS, seenWF := map[string]bool{}, map[string]bool{}
		for _, w := range wfs {
			if !seenNS[w.Namespace] {
				seenNS[w.Namespace] = true
				data.Namespaces = append(data.Namespaces, w.Namespace)
			}
			if !seenWF[w.Name] {
				seenWF[w.Name] = true
				data.Workflows = append(data.Workflows, w.Name)
			}
		}
		sort.Strings(data.Namespaces)
		sort.Strings(data.Workflows)
	}
	switch {
	case q.Q != "":
		// A search: a task id, else an idempotency key.
		data.Searched = true
		if id, perr := strconv.ParseInt(strings.TrimPrefix(q.Q, "#"), 10, 64); perr == nil && id > 0 {
			// A list of one: the task without its steps, with where it
			// stands, as the list shows every task.
			byID, err := d.in(r).List(ctx, weft.TaskFilter{IDs: []int64{id}, Active: true, Limit: 1})
			if err != nil {
				return "", nil, err
			}
			data.Tasks = append(data.Tasks, byID...)
		}
		f.Key = q.Q
		byKey, err := d.in(r).List(ctx, f)
		if err != nil {
			return "", nil, err
		}
		data.Tasks = append(data.Tasks, byKey...)
	default:
		if data.Tasks, err = d.in(r).List(ctx, f); err != nil {
			return "", nil, err
		}
		if len(data.Tasks) == pageSize {
			next := q.values()
			next.Set("cursor", strconv.FormatInt(data.Tasks[len(data.Tasks)-1].ID, 10))
			data.Next = next.Encode()
		}
		if q.Cursor > 0 {
			data.First = q.values().Encode()
			if data.First == "" {
				data.First = "all"
			}
		}
	}
	data.Now = map[int64]*taskview.Standing{}
	for _, t := range data.Tasks {
		if s, ok := taskview.StandingOf(wire.List(t.Active, wire.StepOf)); ok {
			data.Now[t.ID] = &s
		}
	}
	var cancel, retry []string
	for _, t := range data.Tasks {
		id := strconv.FormatInt(t.ID, 10)
		if !t.State.Terminal() {
			cancel = append(cancel, id)
		}
		if t.State == state.TaskFailed {
			retry = append(retry, id)
		}
	}
	data.Cancellable, data.Retryable = len(cancel), len(retry)
	data.CancelIDs, data.RetryIDs = strings.Join(cancel, ","), strings.Join(retry, ",")
	return "Tasks", data, nil
}
