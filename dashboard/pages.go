package dashboard

import (
	"net/http"
	"net/url"
)

// registry lists the dashboard's pages. A new kind of object (schedules,
// namespaces and their limits, the attention list) is one more entry here,
// a loader and a template. Each page names the API route whose data it
// shows, and needs that route's permission.
func (d *Dashboard) registry() []Page {
	return []Page{
		{Pattern: "GET /{$}", Nav: "Overview", NavPath: "/", Template: "overview.html", Route: "GET /v1/tasks",
			Live: func(*http.Request) string { return "" }, Load: d.overview},
		{Pattern: "GET /tasks", Nav: "Tasks", NavPath: "/tasks", Template: "tasks.html", Route: "GET /v1/tasks",
			Live: func(r *http.Request) string {
				q := url.Values{}
				if ns := r.URL.Query().Get("namespace"); ns != "" {
					q.Set("namespace", ns)
				}
				return q.Encode()
			}, Load: d.tasks},
		{Pattern: "GET /tasks/{id}", Template: "task.html", Route: "GET /v1/tasks/{id}",
			Live: func(r *http.Request) string { return url.Values{"task": {r.PathValue("id")}}.Encode() }, Load: d.task},
		{Pattern: "GET /workflows", Nav: "Workflows", NavPath: "/workflows", Template: "workflows.html", Route: "GET /v1/workflows", Load: d.workflows},
		{Pattern: "GET /workflows/{namespace}/{name}", Template: "workflow.html", Route: "GET /v1/workflows/{namespace}/{name}/versions/{version}", Load: d.workflow},
		{Pattern: "GET /workers", Nav: "Workers", NavPath: "/workers", Template: "workers.html", Route: "GET /v1/workers",
			Live: func(*http.Request) string { return "" }, Load: d.workers},
		{Pattern: "GET /attention", Nav: "Attention", NavPath: "/attention", Template: "attention.html", Route: "GET /v1/tasks",
			Live: func(*http.Request) string { return "" }, Load: d.attention},
		{Pattern: "GET /schedules", Nav: "Schedules", NavPath: "/schedules", Template: "schedules.html", Route: "GET /v1/schedules", Load: d.schedules},
		{Pattern: "GET /namespaces", Nav: "Namespaces", NavPath: "/namespaces", Template: "policies.html", Route: "GET /v1/policies", Load: d.policies},
	}
}
