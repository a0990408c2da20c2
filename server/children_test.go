package server_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/client"
	"github.com/weftrun/weft/server"
	"github.com/weftrun/weft/wire"
)

// TestSubWorkflowAPI: templates with a workflow step register through the
// API, and a task shows its children and a child its parent, through the
// Go client; no remote worker may claim the engine's own handler.
func TestSubWorkflowAPI(t *testing.T) {
	t.Parallel()
	for name, open := range backends() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			en := newEnv(t, open(t), server.Options{})
			ctx := context.Background()
			c, err := client.New(en.url, en.admin)
			require.NoError(t, err)
			_, err = c.RegisterTemplate(ctx, "child.yaml", []byte("namespace: t\nname: child\nversion: \"1\"\nsteps:\n  - name: add\n    handler: go.add\n"))
			require.NoError(t, err)
			_, err = c.RegisterTemplate(ctx, "parent.yaml", []byte(`namespace: t
name: parent
version: "1"
steps:
  - name: first
    handler: go.add
  - name: call
    type: workflow
    workflow: t/child
    input: '{"n": deps.first.n * 10.0}'
    depends_on: [first]
`))
			require.NoError(t, err)
			res, err := c.Submit(ctx, wire.SubmitRequest{Workflow: "t/parent", Input: []byte(`{"n": 2}`)})
			require.NoError(t, err)
			en.waitTask(res.Task.ID)
			parent, err := c.Get(ctx, res.Task.ID)
			require.NoError(t, err)
			require.Equal(t, "completed", string(parent.State), parent.Error)
			require.Len(t, parent.Children, 1)
			require.Equal(t, parent.Children[0], parent.Steps[1].ChildTaskID)
			require.JSONEq(t, `{"add": {"n": 20}}`, string(parent.Steps[1].Result))
			child, err := c.Get(ctx, parent.Children[0])
			require.NoError(t, err)
			require.Equal(t, parent.ID, child.ParentTaskID)
			require.Equal(t, "call", child.ParentStep)
			require.Equal(t, 1, child.Depth)

			w := en.worker(t, "py.enrich")
			for _, own := range []string{"weft.workflow", "weft.signal"} {
				r := w.post("/claim", map[string]any{"handlers": []string{"py.enrich", own}})
				require.Equal(t, 400, r.status, "%s", r.body)
				require.Contains(t, string(r.body), own, "the engine's own handler is named")
			}
		})
	}
}

// TestChildLimitsBoundedAPI: a template whose limits.max_depth or
// limits.max_children pass their upper bound is refused at registration,
// 400 with the field and line.
func TestChildLimitsBoundedAPI(t *testing.T) {
	t.Parallel()
	en := newEnv(t, backends()["sqlite"](t), server.Options{})
	for _, tt := range []struct{ field, value, want string }{
		{"max_depth", "33", `{"line":5,"field":"limits.max_depth","message":"must be at most 32, got 33"}`},
		{"max_children", "1000000", `{"line":5,"field":"limits.max_children","message":"must be at most 10000, got 1000000"}`},
	} {
		r := en.do("POST", "/v1/workflows", en.admin, map[string]string{
			"template": "namespace: t\nname: rec\nversion: \"1\"\nlimits:\n  " + tt.field + ": " + tt.value + "\nsteps:\n  - name: a\n    handler: go.add\n"})
		require.Equal(t, 400, r.status, "%s: %s", tt.field, r.body)
		require.Contains(t, string(r.body), tt.want)
	}
}
