package postgres_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/internal/pgtesting"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/store/postgres"
	"github.com/weftrun/weft/workflow"
)

// TestNotifyWakesOtherEngines: an engine that would poll only once an hour
// runs a task another process submitted at once, woken by NOTIFY.
func TestNotifyWakesOtherEngines(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	worker, submitter, _, quiet := twoStores(t)

	e, err := weft.New(worker, weft.Config{PollInterval: time.Hour, Logger: quiet})
	require.NoError(t, err)
	e.Handle("h", func(context.Context, *weft.Attempt) (any, error) { return "done", nil })
	require.NoError(t, e.Register(ctx, workflow.New("test", "notify", "1").Step("s", "h")))
	require.NoError(t, e.Start(ctx))
	t.Cleanup(func() { e.Stop(ctx) })

	other, err := weft.New(submitter, weft.Config{Logger: quiet})
	require.NoError(t, err)
	res, err := other.Submit(ctx, weft.Submission{Workflow: "test/notify"})
	require.NoError(t, err)
	waitCompleted(t, e, res.Task.ID, "the worker was not woken by the submission")
}

// TestNotifyCoalesced: a burst of transactions that make steps ready sends
// at most one notification per window, and a transaction inside a window is
// still announced, when the window ends.
func TestNotifyCoalesced(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	insert := func(t *testing.T, s postgres.Store) {
		t.Helper()
		_, err := s.InsertTasks(ctx, []store.TaskInsert{{Namespace: "ns", Workflow: "wf", Version: "1",
			Steps: []store.StepInsert{{Name: "a", Handler: "h", MaxAttempts: 1}}}})
		require.NoError(t, err)
	}
	// listen opens a fresh store and a connection listening to its channel.
	listen := func(t *testing.T) (postgres.Store, *pgx.Conn) {
		t.Helper()
		s := pgtesting.Open(t, postgres.Options{MaxConns: 4})
		var schema string
		require.NoError(t, s.DB().QueryRowContext(ctx, `SELECT current_schema()`).Scan(&schema))
		conn, err := pgx.Connect(ctx, pgtesting.URL(t))
		require.NoError(t, err)
		t.Cleanup(func() { conn.Close(context.Background()) })
		_, err = conn.Exec(ctx, `LISTEN `+pgx.Identifier{"weft_ready_" + schema}.Sanitize())
		require.NoError(t, err)
		return s, conn
	}
	// count counts notifications until none came for a second.
	count := func(conn *pgx.Conn) int {
		n := 0
		for {
			waitCtx, cancel := context.WithTimeout(ctx, time.Second)
			_, err := conn.WaitForNotification(waitCtx)
			cancel()
			if err != nil {
				return n
			}
			n++
		}
	}

	t.Run("burst", func(t *testing.T) {
		t.Parallel()
		s, conn := listen(t)
		const burst = 200
		began := time.Now()
		for range burst {
			insert(t, s)
		}
		elapsed := time.Since(began)
		received := count(conn)
		// One per 5 ms window, plus the one that opens the first window and
		// the one announcing the last window, sent after the burst.
		windows := int(elapsed/(5*time.Millisecond)) + 3
		require.LessOrEqual(t, received, windows, "%d notifications for %d transactions in %s", received, burst, elapsed)
		t.Logf("%d notifications for %d transactions in %s", received, burst, elapsed)
	})

	t.Run("trailing", func(t *testing.T) {
		t.Parallel()
		s, conn := listen(t)
		// The first opens a window and notifies; the second either falls in
		// that window, and is announced when it ends, or after it, and
		// notifies itself: two notifications either way.
		insert(t, s)
		insert(t, s)
		require.Equal(t, 2, count(conn))
	})
}

// TestListenerReconnects: a store reports that it hears other processes
// while its listener's LISTEN is in force, and not once the connection is
// gone; work made ready while nobody listened is found once the listener is
// back, by an engine that would poll only once an hour.
func TestListenerReconnects(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	worker, submitter, schema, quiet := twoStores(t)
	var _ store.Listener = worker
	for _, s := range []postgres.Store{worker, submitter} {
		require.Eventually(t, s.Listening, 10*time.Second, 5*time.Millisecond, "the listener never listened")
	}

	e, err := weft.New(worker, weft.Config{PollInterval: time.Hour, Logger: quiet})
	require.NoError(t, err)
	e.Handle("h", func(context.Context, *weft.Attempt) (any, error) { return "done", nil })
	require.NoError(t, e.Register(ctx, workflow.New("test", "relisten", "1").Step("s", "h")))
	require.NoError(t, e.Start(ctx))
	t.Cleanup(func() { e.Stop(ctx) })

	// Cut the worker's listener off (the submitter listens on the same
	// channel: both its connections go, and both stores listen again).
	channel := "weft_ready_" + schema
	var cut int
	require.NoError(t, submitter.DB().QueryRowContext(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE query = $1`, "LISTEN "+pgx.Identifier{channel}.Sanitize()).Scan(&cut))
	require.Equal(t, 2, cut, "one listener per store")
	require.Eventually(t, func() bool { return !worker.Listening() }, 10*time.Second, time.Millisecond, "the store still says it listens")

	other, err := weft.New(submitter, weft.Config{Logger: quiet})
	require.NoError(t, err)
	res, err := other.Submit(ctx, weft.Submission{Workflow: "test/relisten"})
	require.NoError(t, err)
	waitCompleted(t, e, res.Task.ID, "the worker did not look for work when it listened again")
	require.Eventually(t, worker.Listening, 10*time.Second, 5*time.Millisecond, "the listener did not listen again")
}

// TestDueTimeFromElsewhere: a process that runs no engine submits a task to
// start a little later; a lone engine whose every period is an hour starts
// it at its time, told of the new due time by the submission's
// notification, not by a poll.
func TestDueTimeFromElsewhere(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	worker, submitter, _, quiet := twoStores(t)
	require.Eventually(t, worker.Listening, 10*time.Second, 5*time.Millisecond, "the listener never listened")

	e, err := weft.New(worker, weft.Config{PollInterval: time.Hour, HeartbeatInterval: 30 * time.Minute, LeaseTTL: time.Hour, Logger: quiet})
	require.NoError(t, err)
	e.Handle("h", func(context.Context, *weft.Attempt) (any, error) { return "done", nil })
	require.NoError(t, e.Register(ctx, workflow.New("test", "later", "1").Step("s", "h")))
	require.NoError(t, e.Start(ctx))
	t.Cleanup(func() { e.Stop(ctx) })
	// The engine has read its due times (none) and sleeps.
	idle, err := e.Wait(ctx, submitNow(t, submitter))
	require.NoError(t, err)
	require.Equal(t, state.TaskCompleted, idle.State)

	res, err := submitter.InsertTasks(ctx, []store.TaskInsert{{Namespace: "test", Workflow: "later", Version: "1",
		RunAt: time.Now().Add(200 * time.Millisecond), Steps: []store.StepInsert{{Name: "s", Handler: "h", MaxAttempts: 1}}}})
	require.NoError(t, err)
	waitCompleted(t, e, res[0].Task.ID, "the delayed task did not start")
}

// submitNow inserts a task of test/later that may run at once, as a process
// with no engine does, and returns its id.
func submitNow(t *testing.T, s postgres.Store) int64 {
	t.Helper()
	res, err := s.InsertTasks(context.Background(), []store.TaskInsert{{Namespace: "test", Workflow: "later", Version: "1",
		Steps: []store.StepInsert{{Name: "s", Handler: "h", MaxAttempts: 1}}}})
	require.NoError(t, err)
	return res[0].Task.ID
}

// twoStores opens two handles on one fresh schema, as two processes would
// (a worker and a submitter), each with its own listener, and returns them
// with the schema's name and a logger that writes nothing.
func twoStores(t *testing.T) (worker, submitter postgres.Store, schema string, quiet *slog.Logger) {
	t.Helper()
	ctx := context.Background()
	url := pgtesting.URL(t)
	schema = pgtesting.SchemaName("test")
	quiet = slog.New(slog.NewTextHandler(io.Discard, nil))
	open := func() postgres.Store {
		s, err := postgres.Open(ctx, url, postgres.Options{Schema: schema, MaxConns: 4, Logger: quiet})
		require.NoError(t, err)
		return s
	}
	worker, submitter = open(), open()
	t.Cleanup(func() {
		_, _ = submitter.DB().ExecContext(ctx, `DROP SCHEMA `+schema+` CASCADE`)
		submitter.Close()
		worker.Close()
	})
	return worker, submitter, schema, quiet
}

// waitCompleted waits up to 20 s for a task to end and requires that it
// completed; why says what it means if it does not end.
func waitCompleted(t *testing.T, e *weft.Engine, id int64, why string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	task, err := e.Wait(ctx, id)
	require.NoError(t, err, why)
	require.Equal(t, state.TaskCompleted, task.State)
}
