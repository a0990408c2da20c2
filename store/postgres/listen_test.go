package postgres_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/internal/pgtesting"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store/postgres"
)

// TestNotifyWakesOtherEngines: an engine that would poll only once an hour
// runs a task another process submitted at once, woken by NOTIFY.
func TestNotifyWakesOtherEngines(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtesting.URL(t)
	schema := pgtesting.SchemaName("test")
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	open := func() postgres.Store {
		s, err := postgres.Open(ctx, url, postgres.Options{Schema: schema, MaxConns: 4, Logger: quiet})
		require.NoError(t, err)
		return s
	}
	worker, submitter := open(), open()
	t.Cleanup(func() {
		_, _ = submitter.DB().ExecContext(ctx, `DROP SCHEMA `+schema+` CASCADE`)
		submitter.Close()
		worker.Close()
	})

	e, err := weft.New(worker, weft.Config{PollInterval: time.Hour, Logger: quiet})
	require.NoError(t, err)
	e.Handle("h", func(context.Context, *weft.Attempt) (any, error) { return "done", nil })
	require.NoError(t, e.Register(ctx, weft.NewWorkflow("test", "notify", "1").Step("s", "h")))
	require.NoError(t, e.Start(ctx))
	t.Cleanup(func() { e.Stop(ctx) })

	other, err := weft.New(submitter, weft.Config{Logger: quiet})
	require.NoError(t, err)
	res, err := other.Submit(ctx, weft.Submission{Workflow: "test/notify"})
	require.NoError(t, err)
	waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	task, err := e.Wait(waitCtx, res.Task.ID)
	require.NoError(t, err, "the worker was not woken by the submission")
	require.Equal(t, state.TaskCompleted, task.State)
}
