package server_test

import (
	"context"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/client"
	"github.com/weftrun/weft/server"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/wire"
)

// TestWorkflowFilterEveryWayIn: every workflow filter (the task list, the
// bulk filter, the event stream, the schedule list, the Go client and the
// Go API) takes the same forms, NAMESPACE/NAME or NAME, and refuses the
// same malformed or contradictory ones with 400 naming the field.
func TestWorkflowFilterEveryWayIn(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		en := newEnv(t, open(t), server.Options{})
		en.register("namespace: flt\nname: hello\nversion: \"1\"\nsteps:\n  - name: a\n    handler: go.add\n")
		var sub wire.SubmitResponse
		en.ok(201, "POST", "/v1/tasks", map[string]any{"workflow": "flt/hello", "input": map[string]int{"n": 1}}, &sub)
		en.waitTask(sub.Task.ID)
		c, err := client.New(en.url, en.admin)
		require.NoError(t, err)
		ctx := context.Background()

		tests := []struct {
			name, namespace, workflow string
			match                     bool // selects the task; else selects nothing
			bad                       bool // refused: 400 naming the field
			// unknown: names a workflow no namespace registers; a bulk
			// action, which acts on what it names, answers 404.
			unknown bool
		}{
			{"namespace/name", "", "flt/hello", true, false, false},
			{"name", "", "hello", true, false, false},
			{"name in its namespace", "flt", "hello", true, false, false},
			{"namespace/name with its namespace", "flt", "flt/hello", true, false, false},
			{"name in another namespace", "other", "hello", false, false, true},
			{"other namespace/name", "", "other/hello", false, false, true},
			{"namespace/name against the namespace", "other", "flt/hello", false, true, false},
			{"version", "", "flt/hello@1", false, true, false},
			{"three parts", "", "flt/hello/x", false, true, false},
			{"no namespace", "", "/hello", false, true, false},
			{"no name", "", "flt/", false, true, false},
			{"a space", "", "hel lo", false, true, false},
		}
		for _, tt := range tests {
			q := url.Values{"workflow": {tt.workflow}}
			if tt.namespace != "" {
				q.Set("namespace", tt.namespace)
			}
			want := 0
			if tt.match {
				want = 1
			}
			// The task list.
			r := en.do("GET", "/v1/tasks?"+q.Encode(), en.admin, nil)
			if tt.bad {
				require.Equal(t, 400, r.status, "%s: tasks: %s", tt.name, r.body)
				code, field := r.errorCode(t)
				require.Equal(t, server.CodeInvalidField, code, tt.name)
				require.Equal(t, "workflow", field, tt.name)
			} else {
				require.Equal(t, 200, r.status, "%s: tasks: %s", tt.name, r.body)
				var list wire.TaskList
				r.json(t, &list)
				require.Len(t, list.Tasks, want, "%s: tasks", tt.name)
			}
			// The Go client and the Go API.
			tasks, err := c.List(ctx, store.TaskFilter{Namespace: tt.namespace, Workflow: tt.workflow})
			if tt.bad {
				require.Error(t, err, "%s: client", tt.name)
			} else {
				require.NoError(t, err, "%s: client", tt.name)
				require.Len(t, tasks, want, "%s: client", tt.name)
			}
			listed, err := en.e.List(ctx, store.TaskFilter{Namespace: tt.namespace, Workflow: tt.workflow})
			if tt.bad {
				require.ErrorIs(t, err, store.ErrInvalid, "%s: Go API", tt.name)
			} else {
				require.NoError(t, err, "%s: Go API", tt.name)
				require.Len(t, listed, want, "%s: Go API", tt.name)
			}
			// The bulk filter (a dry run counts what it selects).
			r = en.do("POST", "/v1/tasks/delete", en.admin, map[string]any{"dry_run": true,
				"filter": map[string]string{"namespace": tt.namespace, "workflow": tt.workflow, "state": "completed"}})
			switch {
			case tt.bad:
				require.Equal(t, 400, r.status, "%s: bulk: %s", tt.name, r.body)
				_, field := r.errorCode(t)
				require.Equal(t, "filter.workflow", field, tt.name)
			case tt.unknown:
				require.Equal(t, 404, r.status, "%s: bulk: %s", tt.name, r.body)
				code, _ := r.errorCode(t)
				require.Equal(t, server.CodeNotFound, code, tt.name)
			default:
				require.Equal(t, 200, r.status, "%s: bulk: %s", tt.name, r.body)
				var res wire.BulkResult
				r.json(t, &res)
				require.Equal(t, want, res.Matched, "%s: bulk", tt.name)
			}
			// The schedule list and the event stream.
			for _, path := range []string{"/v1/schedules?", "/v1/events?"} {
				r = en.do("GET", path+q.Encode(), en.admin, nil)
				if tt.bad {
					require.Equal(t, 400, r.status, "%s: %s: %s", tt.name, path, r.body)
					_, field := r.errorCode(t)
					require.Equal(t, "workflow", field, tt.name)
				} else {
					require.Equal(t, 200, r.status, "%s: %s: %s", tt.name, path, r.body)
				}
			}
		}
	})
}
