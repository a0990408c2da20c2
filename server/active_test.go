package server_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/client"
	"github.com/weftrun/weft/server"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/wire"
)

const approveTemplate = `namespace: demo
name: approve
version: "1"
steps:
  - name: prepare
    handler: go.add
  - name: approval
    type: signal
    depends_on: [prepare]
    signal: {name: go_live, timeout: 1h}
  - name: apply
    handler: go.add
    depends_on: [approval]
`

// TestListTasksActive: GET /v1/tasks?active=true tells where each
// unfinished task stands, its ready, running and waiting steps, and
// nothing for a finished one; without it no task says; a value that is
// not a boolean is a field error. The Go client asks the same.
func TestListTasksActive(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		en := newEnv(t, open(t), server.Options{})
		en.register(approveTemplate)
		en.register(addTemplate)
		var waiting, done wire.Task
		en.ok(201, "POST", "/v1/tasks", map[string]any{"workflow": "demo/approve"}, &waiting)
		en.ok(201, "POST", "/v1/tasks", map[string]any{"workflow": "ev/add"}, &done)
		en.waitTask(done.ID)
		waitFor(t, "the approval to wait", func() bool {
			var task wire.Task
			en.ok(200, "GET", "/v1/tasks/"+itoa(waiting.ID), nil, &task)
			return task.Steps[1].State == state.StepWaiting
		})

		// active names the steps by id; the rest as the dashboard shows it.
		type stand struct {
			Name, Signal    string
			State           state.Step
			Attempts, Max   int
			Deadline, Steps bool
		}
		standing := func(tasks []wire.Task) map[int64][]stand {
			out := map[int64][]stand{}
			for _, task := range tasks {
				for _, s := range task.Active {
					require.Equal(t, task.ID, s.TaskID)
					out[task.ID] = append(out[task.ID], stand{s.Name, s.Signal, s.State, s.Attempts, s.MaxAttempts, s.RunAt != nil, len(task.Steps) > 0})
				}
			}
			return out
		}
		want := map[int64][]stand{waiting.ID: {{Name: "approval", Signal: "go_live", State: state.StepWaiting, Max: 3, Deadline: true}}}
		for _, tc := range []struct {
			name, query string
			want        map[int64][]stand
		}{
			{"asked", "?active=true", want},
			{"asked with a filter", "?active=1&namespace=demo", want},
			{"not asked", "", map[int64][]stand{}},
			{"asked not to", "?active=false", map[int64][]stand{}},
		} {
			var page wire.TaskList
			en.ok(200, "GET", "/v1/tasks"+tc.query, nil, &page)
			require.Equal(t, tc.want, standing(page.Tasks), tc.name)
		}
		r := en.do("GET", "/v1/tasks?active=maybe", en.admin, nil)
		require.Equal(t, 400, r.status, "%s", r.body)
		code, field := r.errorCode(t)
		require.Equal(t, server.CodeInvalidField, code)
		require.Equal(t, "active", field)

		c, err := client.New(en.url, en.admin)
		require.NoError(t, err)
		tasks, err := c.List(context.Background(), store.TaskFilter{Active: true})
		require.NoError(t, err)
		require.Equal(t, want, standing(tasks))
	})
}
