package main

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/internal/apicontract"
	"github.com/weftrun/weft/server"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/weftdb"
	"github.com/weftrun/weft/wire"
	"github.com/weftrun/weft/workflow"
)

// TestTasksNow: `weft tasks` says where each unfinished task stands, in
// its NOW column, the same on the database and through a server (which
// it asks with active=true), and --json carries the active steps; a
// server that does not know active=true still lists.
func TestTasksNow(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := filepath.Join(t.TempDir(), "weft.db")
	st, err := weftdb.Open(ctx, db, weftdb.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	quiet := slog.New(slog.DiscardHandler)
	e, err := weft.New(st, weft.Config{Logger: quiet, PollInterval: 50 * time.Millisecond, ShutdownTimeout: time.Second})
	require.NoError(t, err)
	e.Handle("t.ok", func(context.Context, *weft.Attempt) (any, error) { return map[string]bool{"ok": true}, nil })
	e.Handle("t.block", func(ctx context.Context, _ *weft.Attempt) (any, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	})
	e.Handle("t.flaky", func(context.Context, *weft.Attempt) (any, error) { return nil, errors.New("flaky") })
	later := workflow.RetryPolicy{MaxAttempts: 3, Backoff: "fixed", Initial: workflow.Duration(time.Hour)}
	for _, w := range []*workflow.Workflow{
		workflow.New("ops", "done", "1").Step("only", "t.ok"),
		workflow.New("ops", "gate", "1").Step("prepare", "t.ok").
			Step("approval", "", workflow.DependsOn("prepare"), workflow.AwaitSignal("approve", time.Hour)).
			Step("apply", "t.ok", workflow.DependsOn("approval")),
		workflow.New("ops", "charge", "1").Step("charge", "t.block", workflow.WithRetry(workflow.RetryPolicy{MaxAttempts: 5})),
		workflow.New("ops", "notify", "1").Step("notify", "t.flaky", workflow.WithRetry(later)),
	} {
		require.NoError(t, e.Register(ctx, w))
	}
	require.NoError(t, e.Start(ctx))
	t.Cleanup(func() { _ = e.Stop(context.Background()) })
	for _, w := range []string{"ops/done", "ops/gate", "ops/charge", "ops/notify"} {
		_, err := e.Submit(ctx, weft.Submission{Workflow: w})
		require.NoError(t, err)
	}
	// Each task reaches where it stands, recorded: its active steps, and
	// none for the finished one.
	want := map[int64][]string{2: {"approval waiting"}, 3: {"charge running"}, 4: {"notify waiting"}}
	activeOf := func(tasks []wire.Task) map[int64][]string {
		active := map[int64][]string{}
		for _, task := range tasks {
			for _, s := range task.Active {
				active[task.ID] = append(active[task.ID], s.Name+" "+string(s.State))
			}
		}
		return active
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for deadline := time.After(30 * time.Second); ; {
		tasks, err := e.List(ctx, weft.TaskFilter{Active: true})
		require.NoError(t, err)
		got := activeOf(wire.List(tasks, wire.TaskOf))
		if len(tasks) == 4 && tasks[3].State == state.TaskCompleted && reflect.DeepEqual(got, want) {
			break
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("the tasks do not stand where they should: %v", got)
		}
	}

	srv, err := server.New(e, server.Options{DisableAuth: true, Logger: quiet})
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })
	hs := httptest.NewServer(apicontract.Serve(t, srv))
	t.Cleanup(hs.Close)

	const clock = `(\w{3} \d+ )?\d\d:\d\d` // a time of day, with its date unless today
	local := weftCLI(t, "tasks", "--db", db)
	requireCode(t, 0, local)
	remote := weftCLI(t, "--server", hs.URL, "tasks")
	requireCode(t, 0, remote)
	require.Equal(t, local.stdout, remote.stdout, "the same on the database and through the server")
	lines := strings.Split(strings.TrimSpace(local.stdout), "\n")
	require.Len(t, lines, 5, local.stdout)
	for i, want := range []string{
		`^ID\s+WORKFLOW\s+STATE\s+NOW\s+CREATED\s+FINISHED\s+ERROR$`,
		`^4\s+ops/notify@1\s+running\s+notify retries at ` + clock + ` after 1/3\s+\d{4}-`,
		`^3\s+ops/charge@1\s+running\s+charge running 1/5\s+\d{4}-`,
		`^2\s+ops/gate@1\s+running\s+approval waits for signal approve until ` + clock + `\s+\d{4}-`,
		`^1\s+ops/done@1\s+completed\s+-\s+\d{4}-`,
	} {
		require.Regexp(t, want, lines[i])
	}

	for _, where := range [][]string{{"--db", db}, {"--server", hs.URL}} {
		r := weftCLI(t, append([]string{"tasks", "--json"}, where...)...)
		requireCode(t, 0, r)
		var tasks []wire.Task
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &tasks))
		require.Equal(t, want, activeOf(tasks), where[0])
	}

	// A server from before active=true refuses the parameter: the list
	// is shown all the same, without where the tasks stand.
	old := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Has("active") {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"error": {"code": "unknown_field", "field": "active", "message": "active: unknown query parameter"}}`))
			return
		}
		srv.ServeHTTP(w, r)
	}))
	t.Cleanup(old.Close)
	r := weftCLI(t, "--server", old.URL, "tasks")
	requireCode(t, 0, r)
	require.Regexp(t, `(?m)^3\s+ops/charge@1\s+running\s+-\s+\d{4}-`, r.stdout)
}
