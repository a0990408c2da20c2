package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// TestConcurrentOutcomesOfOneTask: handles recording the outcomes of the
// same tasks' steps at the same time each lock the tasks before counting
// them down, so no count is lost and every task ends once all its steps
// have. Without the lock two outcomes read the same count, and the task
// never reaches zero.
func TestConcurrentOutcomesOfOneTask(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const engines, tasks, steps = 4, 30, 8
	hs := handles(t, engines)
	ins := make([]store.TaskInsert, tasks)
	for i := range ins {
		ins[i] = store.TaskInsert{Namespace: "ns", Workflow: "wf", Version: "1"}
		for j := range steps {
			ins[i].Steps = append(ins[i].Steps, store.StepInsert{Name: fmt.Sprintf("s%d", j), Handler: "h", MaxAttempts: 1})
		}
	}
	_, err := hs[0].InsertTasks(ctx, ins)
	require.NoError(t, err)
	// One step at a time, in turn: each task's steps are spread over
	// every handle, which then record them in the same order.
	claimed := make([][]store.ClaimedStep, engines)
	for i := range tasks * steps {
		e := i % engines
		got, err := hs[e].ClaimSteps(ctx, store.ClaimParams{EngineID: fmt.Sprintf("e%d", e), Limit: 1})
		require.NoError(t, err)
		require.Len(t, got, 1)
		claimed[e] = append(claimed[e], got...)
	}
	var wg sync.WaitGroup
	for e, s := range hs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, c := range claimed[e] {
				res, err := s.CompleteSteps(ctx, []store.Outcome{{Fence: c.Fence, EngineID: fmt.Sprintf("e%d", e), State: state.StepCompleted}})
				if err == nil {
					err = res[0]
				}
				if err != nil {
					t.Errorf("complete step %d: %v", c.Fence.StepID, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	var open, remaining int
	require.NoError(t, hs[0].DB().QueryRowContext(ctx, `SELECT count(*), COALESCE(sum(remaining), 0) FROM tasks WHERE state <> 'completed'`).Scan(&open, &remaining))
	require.Zero(t, open, "tasks not completed (%d steps not counted)", remaining)
}
