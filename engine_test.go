package weft_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/state"
)

func TestDiamondDataFlow(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		ctx := context.Background()
		e := newEngine(t, open(t), weft.Config{Concurrency: 4})
		e.Handle("add", func(ctx context.Context, a *weft.Attempt) (any, error) {
			var in struct{ N int }
			if err := a.Bind(&in); err != nil {
				return nil, err
			}
			sum := in.N
			for _, raw := range a.Deps {
				var d struct{ Sum int }
				if err := json.Unmarshal(raw, &d); err != nil {
					return nil, err
				}
				sum += d.Sum
			}
			var cfg struct{ Add int }
			if len(a.Config) > 0 {
				_ = json.Unmarshal(a.Config, &cfg)
			}
			return map[string]any{"sum": sum + cfg.Add, "deps": len(a.Deps), "attempt": a.Number}, nil
		})
		w := weft.NewWorkflow("test", "diamond", "1").
			Step("a", "add").
			Step("b", "add", weft.DependsOn("a"), weft.WithConfig(map[string]int{"add": 10})).
			Step("c", "add", weft.DependsOn("a"), weft.WithConfig(map[string]int{"add": 100})).
			Step("d", "add", weft.DependsOn("b", "c"))
		require.NoError(t, e.Register(ctx, w))
		start(t, e)
		res := submit(t, e, weft.Submission{Workflow: "test/diamond", Input: map[string]int{"n": 1}})
		task := wait(t, e, res.Task.ID)
		require.Equal(t, state.TaskCompleted, task.State, task.Error)
		// a = 1; b = 1+1+10 = 12; c = 1+1+100 = 102; d = 1+12+102 = 115
		require.JSONEq(t, `{"sum":115,"deps":2,"attempt":1}`, string(stepByName(t, task, "d").Result))
		require.Equal(t, []string{"b", "c"}, stepByName(t, task, "d").DependsOn)
		for _, s := range task.Steps {
			require.Equal(t, state.StepCompleted, s.State, s.Name)
			require.Equal(t, 1, s.Attempts, s.Name)
		}
	})
}
