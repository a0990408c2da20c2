package dashboard

import (
	"net/http"
	"net/url"

	"github.com/weftrun/weft/server"
)

// registry lists the dashboard's pages. A new kind of object (schedules,
// namespaces and their limits, the attention list) is one more entry here,
// a loader and a template.
func (d *Dashboard) registry() []Page {
	return []Page{
		{Pattern: "GET /{$}", Nav: "Overview", NavPath: "/", Template: "overview.html", Perm: server.PermTasksRead,
			Live: func(*http.Request) string { return "" }, Load: d.overview},
		{Pattern: "GET /tasks", Nav: "Tasks", NavPath: "/tasks", Template: "tasks.html", Perm: server.PermTasksRead,
			Live: func(r *http.Request) string {
				q := url.Values{}
				if ns := r.URL.Query().Get("namespace"); ns != "" {
					q.Set("namespace", ns)
				}
				return q.Encode()
			}, Load: d.tasks},
		{Pattern: "GET /tasks/{id}", Template: "task.html", Perm: server.PermTasksRead,
			Live: func(r *http.Request) string { return url.Values{"task": {r.PathValue("id")}}.Encode() }, Load: d.task},
		{Pattern: "GET /workflows", Nav: "Workflows", NavPath: "/workflows", Template: "workflows.html", Perm: server.PermWorkflowsRead, Load: d.workflows},
		{Pattern: "GET /workflows/{namespace}/{name}", Template: "workflow.html", Perm: server.PermWorkflowsRead, Load: d.workflow},
		{Pattern: "GET /workers", Nav: "Workers", NavPath: "/workers", Template: "workers.html", Perm: server.PermTasksRead,
			Live: func(*http.Request) string { return "" }, Load: d.workers},
		{Pattern: "GET /attention", Nav: "Attention", NavPath: "/attention", Template: "attention.html", Perm: server.PermTasksRead,
			Live: func(*http.Request) string { return "" }, Load: d.attention},
		{Pattern: "GET /schedules", Nav: "Schedules", NavPath: "/schedules", Template: "schedules.html", Perm: server.PermWorkflowsRead, Load: d.schedules},
		{Pattern: "GET /namespaces", Nav: "Namespaces", NavPath: "/namespaces", Template: "policies.html", Perm: server.PermPoliciesRead, Load: d.policies},
	}
}
