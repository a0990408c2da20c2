package weft_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/workflow"
)

// TestPreemption: on an engine with one slot, a long preemptible step of
// low priority runs; a task with a step of higher priority is submitted.
// The low step's context is cancelled with ErrPreempted, the high step
// runs, then the low step runs again from its checkpoint, under the same
// attempt number, and completes. The audit names the preemptor.
func TestPreemption(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		e := newEngine(t, open(t), weft.Config{Concurrency: 1})
		var mu sync.Mutex
		var order []string
		var causes []error
		var checkpoints []string
		var numbers []int
		started := make(chan struct{}, 1)
		e.Handle("crunch", func(ctx context.Context, a *weft.Attempt) (any, error) {
			mu.Lock()
			order = append(order, "crunch")
			checkpoints = append(checkpoints, string(a.Checkpoint))
			numbers = append(numbers, a.Number)
			mu.Unlock()
			if len(a.Checkpoint) > 0 {
				return json.RawMessage(`{"resumed": true}`), nil
			}
			if err := a.SaveCheckpoint(ctx, map[string]int{"done": 1}); err != nil {
				return nil, err
			}
			started <- struct{}{}
			<-ctx.Done()
			mu.Lock()
			causes = append(causes, context.Cause(ctx))
			mu.Unlock()
			return nil, ctx.Err()
		})
		e.Handle("alert", func(context.Context, *weft.Attempt) (any, error) {
			mu.Lock()
			order = append(order, "alert")
			mu.Unlock()
			return nil, nil
		})
		var preemptions []weft.Event
		unsubscribe := e.Subscribe(func(ev weft.Event) {
			if ev.Kind == weft.EventPreempted {
				mu.Lock()
				preemptions = append(preemptions, ev)
				mu.Unlock()
			}
		})
		t.Cleanup(unsubscribe)
		register(t, e, workflow.New("ops", "report", "1").Step("crunch", "crunch", workflow.Preemptible(), workflow.WithPriority(-1)))
		register(t, e, workflow.New("ops", "page", "1").Step("alert", "alert", workflow.WithPriority(5)))
		start(t, e)

		low := submit(t, e, weft.Submission{Workflow: "ops/report"}).Task.ID
		<-started
		high := submit(t, e, weft.Submission{Workflow: "ops/page"}).Task.ID

		require.Equal(t, state.TaskCompleted, wait(t, e, high).State)
		task := wait(t, e, low)
		require.Equal(t, state.TaskCompleted, task.State)
		crunch := stepByName(t, task, "crunch")
		require.Equal(t, 1, crunch.Attempts, "the preempted attempt was given back")
		require.JSONEq(t, `{"resumed": true}`, string(crunch.Result))

		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, []string{"crunch", "alert", "crunch"}, order)
		require.Len(t, causes, 1)
		require.ErrorIs(t, causes[0], weft.ErrPreempted)
		require.Contains(t, causes[0].Error(), fmt.Sprintf("task %d step %q", high, "alert"))
		require.Equal(t, []string{"", `{"done":1}`}, checkpoints, "the second run resumed from the checkpoint")
		require.Equal(t, []int{1, 1}, numbers)
		require.Len(t, preemptions, 1)
		require.Equal(t, low, preemptions[0].TaskID)
		require.Equal(t, "crunch", preemptions[0].Step)

		audit, err := e.Audit(t.Context(), low)
		require.NoError(t, err)
		found := false
		for _, a := range audit {
			if a.Step == "crunch" && a.From == "running" && a.To == "ready" {
				found = true
				require.Equal(t, fmt.Sprintf("preempted by task %d step %q (priority 5)", high, "alert"), a.Reason)
				require.Equal(t, 1, a.Attempt)
			}
		}
		require.True(t, found, "the audit records the preemption: %+v", audit)
	})
}

// TestPreemptionIgnored: a preemptible handler that ignores its context and
// returns a result completes as usual.
func TestPreemptionIgnored(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		e := newEngine(t, open(t), weft.Config{Concurrency: 1})
		started := make(chan struct{}, 1)
		preempted := make(chan error, 1)
		e.Handle("stubborn", func(ctx context.Context, a *weft.Attempt) (any, error) {
			started <- struct{}{}
			<-ctx.Done()
			preempted <- context.Cause(ctx)
			return "finished anyway", nil
		})
		e.Handle("alert", func(context.Context, *weft.Attempt) (any, error) { return nil, nil })
		register(t, e, workflow.New("ops", "stubborn", "1").Step("s", "stubborn", workflow.Preemptible()))
		register(t, e, workflow.New("ops", "page", "1").Step("alert", "alert", workflow.WithPriority(5)))
		start(t, e)
		low := submit(t, e, weft.Submission{Workflow: "ops/stubborn"}).Task.ID
		<-started
		high := submit(t, e, weft.Submission{Workflow: "ops/page"}).Task.ID
		require.True(t, errors.Is(<-preempted, weft.ErrPreempted))
		task := wait(t, e, low)
		require.Equal(t, state.TaskCompleted, task.State)
		require.JSONEq(t, `"finished anyway"`, string(stepByName(t, task, "s").Result))
		require.Equal(t, 1, stepByName(t, task, "s").Attempts)
		require.Equal(t, state.TaskCompleted, wait(t, e, high).State)
	})
}
