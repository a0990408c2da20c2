package weft_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/workflow"
)

// TestSupersede: a submission with on_conflict supersede cancels the
// unfinished task holding its key (stopping its running handler) and
// replaces it; the cancelled task's audit names its successor. The
// workflow's own on_conflict applies when the submission does not say,
// and the key is required.
func TestSupersede(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		e := newEngine(t, open(t), weft.Config{})
		started := make(chan int64, 4)
		e.Handle("sync", func(ctx context.Context, a *weft.Attempt) (any, error) {
			var in struct{ Version int }
			if err := a.Bind(&in); err != nil {
				return nil, err
			}
			if in.Version == 1 {
				started <- a.TaskID
				<-ctx.Done() // superseded: stopped by its lost lease
				return nil, ctx.Err()
			}
			return in.Version, nil
		})
		register(t, e, workflow.New("t", "sync", "1").Step("s", "sync"))
		register(t, e, workflow.New("t", "latest", "1").WithOnConflict(workflow.OnConflictSupersede).Step("s", "sync"))
		start(t, e)
		ctx := context.Background()

		first := submit(t, e, weft.Submission{Workflow: "t/sync", Key: "cart-7", Input: map[string]int{"version": 1}})
		require.Equal(t, first.Task.ID, <-started)
		dup := submit(t, e, weft.Submission{Workflow: "t/sync", Key: "cart-7", Input: map[string]int{"version": 2}})
		require.True(t, dup.Duplicate, "return is the default")

		second := submit(t, e, weft.Submission{Workflow: "t/sync", Key: "cart-7", Input: map[string]int{"version": 2}, OnConflict: workflow.OnConflictSupersede})
		require.False(t, second.Duplicate)
		require.Equal(t, first.Task.ID, second.Superseded)
		require.Equal(t, "completed", string(wait(t, e, second.Task.ID).State))
		old := wait(t, e, first.Task.ID)
		require.Equal(t, "cancelled", string(old.State))
		audit, err := e.Audit(ctx, first.Task.ID)
		require.NoError(t, err)
		var reasons []string
		for _, a := range audit {
			reasons = append(reasons, a.Reason)
		}
		require.Contains(t, reasons, `superseded by task `+itoa(second.Task.ID)+` (idempotency key "cart-7")`)

		// The workflow's default, and a key is needed.
		a := submit(t, e, weft.Submission{Workflow: "t/latest", Key: "k", Input: map[string]int{"version": 3}})
		b := submit(t, e, weft.Submission{Workflow: "t/latest", Key: "k", Input: map[string]int{"version": 4}})
		require.Equal(t, a.Task.ID, b.Superseded)
		_, err = e.Submit(ctx, weft.Submission{Workflow: "t/latest"})
		require.ErrorIs(t, err, weft.ErrInvalid)
		_, err = e.Submit(ctx, weft.Submission{Workflow: "t/sync", Key: "x", OnConflict: "replace"})
		require.ErrorIs(t, err, weft.ErrInvalid)
	})
}
