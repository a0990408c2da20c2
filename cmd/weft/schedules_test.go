package main

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/internal/apicontract"
	"github.com/weftrun/weft/server"
	"github.com/weftrun/weft/weftdb"
)

const nightlyTemplate = `namespace: ops
name: report
version: "1"
schedules:
  - name: nightly
    cron: "0 3 * * *"
    time_zone: America/New_York
    input: { full: true }
    catch_up: all
    max_catch_up: 3
steps:
  - name: build
    handler: exec
    config: { command: ["true"] }
`

// TestRegisterAndSchedules: register records templates and their
// schedules without a task; schedules lists, pauses, resumes and shows
// them, locally and through --server.
func TestRegisterAndSchedules(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := writeFile(t, dir, "report.yaml", nightlyTemplate)
	db := filepath.Join(dir, "weft.db")

	r := weftCLI(t, "--db", db, "register", file)
	requireCode(t, 0, r)
	require.Equal(t, file+": registered ops/report@1 (1 steps, 1 schedules)\n", r.stdout)
	r = weftCLI(t, "--db", db, "tasks", "--json")
	requireCode(t, 0, r)
	require.Equal(t, "[]", strings.TrimSpace(r.stdout), "registering submits nothing")

	r = weftCLI(t, "--db", db, "schedules")
	requireCode(t, 0, r)
	require.Contains(t, r.stdout, "ops/report/nightly")
	require.Contains(t, r.stdout, "America/New_York")
	require.Contains(t, r.stdout, "all (max 3)")
	require.Contains(t, r.stdout, "active")

	r = weftCLI(t, "--db", db, "schedules", "pause", "nightly", "--reason", "quarter close")
	requireCode(t, 0, r)
	require.Equal(t, "schedule ops/report/nightly paused\n", r.stdout)
	r = weftCLI(t, "--db", db, "schedules", "--namespace", "ops")
	requireCode(t, 0, r)
	require.Contains(t, r.stdout, "paused")
	r = weftCLI(t, "--db", db, "schedules", "resume", "ops/report/nightly")
	requireCode(t, 0, r)
	require.Contains(t, r.stdout, "schedule ops/report/nightly resumed: next tick ")
	r = weftCLI(t, "--db", db, "schedules", "show", "nightly")
	requireCode(t, 0, r)
	require.Contains(t, r.stdout, "paused by cli:")
	require.Contains(t, r.stdout, ": quarter close")
	require.Contains(t, r.stdout, "resumed by cli:")

	requireCode(t, 1, weftCLI(t, "--db", db, "schedules", "pause", "nope"))
	requireCode(t, 2, weftCLI(t, "--db", db, "schedules", "pause", "ops/nightly"))

	// A bad file registers nothing, not even the good ones beside it.
	other := writeFile(t, dir, "other.yaml", strings.ReplaceAll(nightlyTemplate, "name: report", "name: other"))
	bad := writeFile(t, dir, "bad.yaml", strings.ReplaceAll(nightlyTemplate, `"0 3 * * *"`, `"0 25 * * *"`))
	r = weftCLI(t, "--db", db, "register", other, bad)
	requireCode(t, 2, r)
	require.Contains(t, r.stderr, bad+":5: schedules.nightly.cron:")
	r = weftCLI(t, "--db", db, "schedules", "--json")
	requireCode(t, 0, r)
	require.NotContains(t, r.stdout, `"other"`)

	// Through a server.
	ctx := context.Background()
	s, err := weftdb.Open(ctx, filepath.Join(dir, "served.db"), weftdb.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	e, err := weft.New(s, weft.Config{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	srv, err := server.New(e, server.Options{DisableAuth: true, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	hs := httptest.NewServer(apicontract.Serve(t, srv))
	t.Cleanup(hs.Close)
	r = weftCLI(t, "--server", hs.URL, "register", file)
	requireCode(t, 0, r)
	require.Equal(t, file+": registered ops/report@1 (1 steps, 1 schedules)\n", r.stdout)
	r = weftCLI(t, "--server", hs.URL, "register", bad)
	requireCode(t, 2, r)
	require.Contains(t, r.stderr, bad+":5:")
	r = weftCLI(t, "--server", hs.URL, "schedules", "pause", "nightly", "--reason", "remote")
	requireCode(t, 0, r)
	r = weftCLI(t, "--server", hs.URL, "schedules", "show", "nightly")
	requireCode(t, 0, r)
	require.Contains(t, r.stdout, "paused by api:anonymous: remote")
	r = weftCLI(t, "--server", hs.URL, "schedules")
	requireCode(t, 0, r)
	require.Contains(t, r.stdout, "paused")
}

// TestTaskShowsSchedule: a task a schedule submitted names the schedule
// and its tick in `weft task`.
func TestTaskShowsSchedule(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "weft.db")
	file := writeFile(t, dir, "beat.yaml", `namespace: ops
name: beat
version: "1"
schedules:
  - name: every-second
    cron: "@every 1s"
steps:
  - name: s
    handler: exec
    config: { command: ["true"] }
`)
	requireCode(t, 0, weftCLI(t, "--db", db, "register", file))
	ctx := context.Background()
	s, err := weftdb.Open(ctx, db, weftdb.Options{})
	require.NoError(t, err)
	e, err := weft.New(s, weft.Config{Logger: slog.New(slog.DiscardHandler), PollInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, e.Start(ctx))
	var id int64
	deadline := time.Now().Add(20 * time.Second)
	for id == 0 && time.Now().Before(deadline) {
		tasks, err := e.List(ctx, weft.TaskFilter{})
		require.NoError(t, err)
		if len(tasks) > 0 {
			id = tasks[0].ID
		}
		time.Sleep(10 * time.Millisecond)
	}
	require.NoError(t, e.Stop(ctx))
	require.NoError(t, s.Close())
	require.NotZero(t, id, "the schedule fired")
	r := weftCLI(t, "--db", db, "task", "1")
	requireCode(t, 0, r)
	require.Contains(t, r.stdout, "Schedule:  ops/beat/every-second, tick ")
}

// TestSubmitSupersede: weft submit --on-conflict supersede replaces the
// task holding the key and says so.
func TestSubmitSupersede(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "weft.db")
	file := writeFile(t, dir, "w.yaml", "namespace: t\nname: w\nversion: \"1\"\nsteps:\n  - name: a\n    handler: exec\n    config: { command: [\"true\"] }\n")
	requireCode(t, 0, weftCLI(t, "--db", db, "submit", file, "--key", "k", "--run-at", "1h"))
	r := weftCLI(t, "--db", db, "submit", file, "--key", "k", "--on-conflict", "supersede")
	requireCode(t, 0, r)
	require.Equal(t, "2\n", r.stdout)
	require.Contains(t, r.stderr, "task 2 supersedes task 1")
	r = weftCLI(t, "--db", db, "task", "1", "--audit")
	requireCode(t, 0, r)
	require.Contains(t, r.stdout, "cancelled")
	require.Contains(t, r.stdout, `superseded by task 2 (idempotency key "k")`)
	requireCode(t, 2, weftCLI(t, "--db", db, "submit", file, "--key", "k", "--on-conflict", "replace"))
	requireCode(t, 2, weftCLI(t, "--db", db, "submit", file, "--on-conflict", "supersede"))
}
