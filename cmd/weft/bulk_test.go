package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/internal/apicontract"
	"github.com/weftrun/weft/server"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/weftdb"
	"github.com/weftrun/weft/wire"
)

// parkedCheckoutYAML has a step no engine serves: its tasks stay pending.
const parkedCheckoutYAML = `namespace: shop
name: checkout
version: "1"
steps:
  - name: charge
    handler: shop.charge
`

func TestTagsAndBulkCLI(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "weft.db")
	file := writeFile(t, dir, "checkout.yaml", parkedCheckoutYAML)
	for _, env := range []string{"staging", "staging", "prod"} {
		requireCode(t, 0, weftCLI(t, "submit", file, "--db", db, "--tag", "env="+env, "--tag", "team=pay"))
	}
	for _, tt := range []struct {
		name string
		args []string
		msg  string
	}{
		{"bad key", []string{"submit", "shop/checkout", "--tag", "bad key=1"}, "a key holds ASCII letters"},
		{"no value", []string{"submit", "shop/checkout", "--tag", "env"}, "want KEY=VALUE"},
		{"twice", []string{"submit", "shop/checkout", "--tag", "a=1", "--tag", "a=2"}, "--tag a is given twice"},
		{"list bad tag", []string{"tasks", "--tag", "=x"}, "the key is empty"},
		{"cancel without filter", []string{"cancel"}, "give a task ID or a filter"},
		{"id and filter", []string{"cancel", "1", "--state", "pending"}, "not both"},
		{"delete unfinished", []string{"delete", "--state", "pending"}, "tasks that are pending cannot be deleted"},
		{"retry completed", []string{"retry", "--state", "completed"}, "tasks that are completed cannot be retried"},
	} {
		r := weftCLI(t, append(tt.args, "--db", db)...)
		requireCode(t, exitUsage, r)
		require.Contains(t, r.stderr, tt.msg, tt.name)
	}

	r := weftCLI(t, "tasks", "--db", db, "--tag", "env=staging", "--tag", "team=pay", "--json")
	requireCode(t, 0, r)
	var tasks []wire.Task
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &tasks))
	require.Len(t, tasks, 2)
	require.Equal(t, map[string]string{"env": "staging", "team": "pay"}, tasks[0].Tags)
	r = weftCLI(t, "tasks", "--db", db, "--tag", "env=prod")
	requireCode(t, 0, r)
	require.Contains(t, r.stdout, "env=prod,team=pay")

	r = weftCLI(t, "cancel", "--db", db, "--workflow", "shop/checkout", "--state", "pending", "--tag", "env=staging", "--dry-run")
	requireCode(t, 0, r)
	require.Equal(t, "2 tasks would be cancelled (dry run: nothing changed)\n", r.stdout)
	r = weftCLI(t, "cancel", "--db", db, "--workflow", "shop/checkout", "--state", "pending", "--tag", "env=staging", "--reason", "staging reset")
	requireCode(t, 0, r)
	require.Equal(t, "2 tasks cancelled\n", r.stdout)
	r = weftCLI(t, "task", "1", "--db", db, "--audit")
	requireCode(t, 0, r)
	require.Contains(t, r.stdout, "staging reset")
	require.Contains(t, r.stdout, "cli:")
	// A rerun has nothing left to do.
	r = weftCLI(t, "cancel", "--db", db, "--workflow", "shop/checkout", "--tag", "env=staging")
	requireCode(t, 0, r)
	require.Equal(t, "0 tasks cancelled\n", r.stdout)

	archive := filepath.Join(dir, "deleted.jsonl")
	r = weftCLI(t, "delete", "--db", db, "--state", "cancelled", "--archive", archive, "--reason", "cleanup")
	requireCode(t, 0, r)
	require.Equal(t, "2 tasks deleted\n", r.stdout)
	lines := readArchiveLines(t, archive)
	require.Len(t, lines, 2)
	var a wire.ArchivedTask
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &a))
	require.Equal(t, state.TaskCancelled, a.Task.State)
	require.Len(t, a.Task.Steps, 1)
	require.NotEmpty(t, a.Audit)
	requireCode(t, 1, weftCLI(t, "task", "1", "--db", db))

	// By id: an unfinished task is left unless forced.
	r = weftCLI(t, "delete", "3", "--db", db)
	requireCode(t, exitFailed, r)
	require.Equal(t, "0 tasks deleted, 1 skipped (not in a state the action applies to, or changed meanwhile)\n", r.stdout)
	require.Contains(t, r.stderr, "1 of the tasks given was not deleted (unfinished tasks are deleted only with --force")
	r = weftCLI(t, "delete", "3", "--db", db, "--force")
	requireCode(t, 0, r)
	require.Equal(t, "1 tasks deleted\n", r.stdout)
	r = weftCLI(t, "oplog", "--db", db, "--json")
	requireCode(t, 0, r)
	var log []wire.OperatorEntry
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &log))
	require.Len(t, log, 3, "one entry per deleted task")
	require.Equal(t, "task 3", log[0].Subject)
	require.Equal(t, "cleanup", log[2].Reason)
	require.Equal(t, "delete", log[2].Action)
}

func TestPruneRetentionAttentionCLI(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "weft.db")
	requireCode(t, 1, weftCLI(t, "run", writeFile(t, dir, "fail.yaml", failYAML), "--db", db))
	registerWorkflows(t, db, "shop")

	r := weftCLI(t, "tasks", "--db", db, "--attention")
	requireCode(t, 0, r)
	require.Contains(t, r.stdout, "step charge failed: ")
	require.Contains(t, r.stdout, "card declined")

	r = weftCLI(t, "retry", "--db", db, "--attention", "--dry-run")
	requireCode(t, 0, r)
	require.Equal(t, "1 tasks would be retried (dry run: nothing changed)\n", r.stdout)

	r = weftCLI(t, "prune", "--db", db, "--state", "failed", "--older-than", "1d", "--dry-run")
	requireCode(t, 0, r)
	require.Equal(t, "0 tasks would be deleted (dry run: nothing changed)\n", r.stdout)
	r = weftCLI(t, "prune", "--db", db, "--state", "failed", "--older-than", "1ns")
	requireCode(t, 0, r)
	require.Equal(t, "1 tasks deleted\n", r.stdout)
	for _, args := range [][]string{
		{"prune", "--state", "running", "--older-than", "1d"},
		{"prune", "--state", "failed", "--older-than", "soon"},
		{"prune", "--state", "failed", "--older-than", "1d", "--archive", "x", "--server", "http://127.0.0.1:1"},
		{"retention", "shop"},
		{"retention", "--completed", "7d"},
		{"retention", "shop", "--completed", "-1h"},
		{"retention", "shop", "--completed", "1ns"},
		{"prune", "--state", "failed", "--older-than", "1ns", "--archive", ""},
		{"delete", "1", "--archive", " "},
	} {
		requireCode(t, exitUsage, weftCLI(t, append(args, "--db", db)...))
	}

	r = weftCLI(t, "retention", "shop", "--db", db, "--completed", "7d", "--failed", "30d")
	requireCode(t, 0, r)
	require.Contains(t, r.stdout, "completed  7d")
	r = weftCLI(t, "retention", "shop", "--db", db, "--failed", "0")
	requireCode(t, 0, r)
	require.NotContains(t, r.stdout, "failed")
	r = weftCLI(t, "retention", "--db", db, "--json")
	requireCode(t, 0, r)
	var rs []wire.RetentionSetting
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rs))
	require.Len(t, rs, 1)

	r = weftCLI(t, "workers", "--db", db)
	requireCode(t, 0, r)
	require.Contains(t, r.stderr, "no live engines or workers")
}

func readArchiveLines(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) != "" {
			out = append(out, sc.Text())
		}
	}
	require.NoError(t, sc.Err())
	return out
}

// TestBulkThroughServer: with --server, tags, bulk actions, prune,
// retention and workers go through the API.
func TestBulkThroughServer(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "weft.db")
	token := createKey(t, db, "ops", "admin:*")
	url, stop := startServe(t, db)
	defer stop()
	as := func(args ...string) result {
		return weftCLI(t, append([]string{"--server", url, "--token", token}, args...)...)
	}
	file := writeFile(t, dir, "checkout.yaml", parkedCheckoutYAML)
	requireCode(t, 0, as("submit", file, "--tag", "env=staging"))
	requireCode(t, 0, as("submit", file, "--tag", "env=prod"))
	r := as("tasks", "--tag", "env=staging", "--json")
	requireCode(t, 0, r)
	var tasks []wire.Task
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &tasks))
	require.Len(t, tasks, 1)
	r = as("cancel", "--tag", "env=staging", "--reason", "reset")
	requireCode(t, 0, r)
	require.Equal(t, "1 tasks cancelled\n", r.stdout)
	r = as("delete", "--state", "cancelled")
	requireCode(t, 0, r)
	require.Equal(t, "1 tasks deleted\n", r.stdout)
	r = as("delete", "2")
	requireCode(t, exitFailed, r)
	require.Equal(t, "0 tasks deleted, 1 skipped (not in a state the action applies to, or changed meanwhile)\n", r.stdout, "task 2 is pending")
	r = as("delete", "2", "--force", "--reason", "by id")
	requireCode(t, 0, r)
	require.Equal(t, "1 tasks deleted\n", r.stdout)
	r = as("task", "2")
	requireCode(t, exitFailed, r)
	require.Contains(t, r.stderr, "task 2: not found")
	requireCode(t, exitUsage, as("delete", "0"))
	requireCode(t, exitUsage, as("delete", "--state", "cancelled", "--archive", filepath.Join(dir, "a.jsonl")))
	r = as("prune", "--state", "completed", "--older-than", "7d", "--dry-run")
	requireCode(t, 0, r)
	require.Equal(t, "0 tasks would be deleted (dry run: nothing changed)\n", r.stdout)
	r = as("retention", "shop", "--completed", "7d")
	requireCode(t, 0, r)
	require.Contains(t, r.stdout, "completed  7d")
	r = as("oplog")
	requireCode(t, 0, r)
	require.Contains(t, r.stdout, "retention")
	require.Contains(t, r.stdout, "task 1")
	r = as("workers")
	requireCode(t, 0, r)
	require.Contains(t, r.stdout, "engine (leader)")
	require.Contains(t, r.stdout, "exec")
}

// TestPruneAgeMustBePositive: an age of 0 or less is refused saying why
// (a prune keeps what finished recently; it would keep nothing) and what
// to use instead, on the command line, in the Go API and in REST.
func TestPruneAgeMustBePositive(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "weft.db")
	requireCode(t, 0, weftCLI(t, "--db", db, "migrate"))
	for _, age := range []string{"0s", "0", "0d", "-1h"} {
		r := weftCLI(t, "--db", db, "prune", "--state", "failed", "--older-than", age)
		requireCode(t, exitUsage, r)
		require.Contains(t, r.stderr, "must be more than 0", age)
		require.Contains(t, r.stderr, "would keep none", age)
		require.Contains(t, r.stderr, "weft delete --state failed", age)
	}
	r := weftCLI(t, "--db", db, "delete", "--state", "failed", "--created-before", "0s")
	requireCode(t, exitUsage, r)
	require.Contains(t, r.stderr, "an age must be more than 0")

	err := weft.CheckPruneAge(state.TaskCompleted, 0)
	require.ErrorIs(t, err, weft.ErrInvalid)
	require.Contains(t, err.Error(), "would keep none")

	url, _ := startServe(t, db, "--insecure-no-auth")
	res, err := http.Post(url+"/v1/tasks/prune", "application/json", strings.NewReader(`{"state": "failed", "older_than": "0s"}`))
	require.NoError(t, err)
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	require.Equal(t, http.StatusBadRequest, res.StatusCode)
	require.Contains(t, string(body), "would keep none")
	require.Contains(t, string(body), `"field":"older_than"`)
}

// TestBulkInStepsThroughServer: a server that answers bulk actions after
// one batch of 4 tasks ("complete": false, with what remains and a cursor)
// still has every task acted on by one command, which goes on until the
// action is complete and prints the true total; by filter, by ids and for
// prune.
func TestBulkInStepsThroughServer(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx := context.Background()
	s, err := weftdb.Open(ctx, filepath.Join(dir, "served.db"), weftdb.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	e, err := weft.New(s, weft.Config{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	srv, err := server.New(e, server.Options{DisableAuth: true, Logger: slog.New(slog.DiscardHandler), BulkBatchSize: 4, BulkMaxBatches: 1})
	require.NoError(t, err)
	hs := httptest.NewServer(apicontract.Serve(t, srv))
	t.Cleanup(hs.Close)
	as := func(args ...string) result { return weftCLI(t, append([]string{"--server", hs.URL}, args...)...) }
	file := writeFile(t, dir, "checkout.yaml", parkedCheckoutYAML)
	requireCode(t, 0, as("register", file))
	const n = 11
	for range n {
		requireCode(t, 0, as("submit", file))
	}
	r := as("cancel", "--workflow", "shop/checkout", "--reason", "in steps")
	requireCode(t, 0, r)
	require.Equal(t, fmt.Sprintf("%d tasks cancelled\n", n), r.stdout)
	require.Contains(t, r.stderr, "4 tasks cancelled so far, 7 remaining: going on")
	count := func(st string) int {
		r := as("tasks", "--state", st, "--json", "--limit", "100")
		requireCode(t, 0, r)
		var tasks []wire.Task
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &tasks))
		return len(tasks)
	}
	require.Equal(t, n, count("cancelled"))

	r = as("delete", "1", "2", "3", "4", "5", "6")
	requireCode(t, 0, r)
	require.Equal(t, "6 tasks deleted\n", r.stdout)
	require.Equal(t, n-6, count("cancelled"))

	r = as("prune", "--state", "cancelled", "--older-than", "1ms")
	requireCode(t, 0, r)
	require.Equal(t, fmt.Sprintf("%d tasks deleted\n", n-6), r.stdout)
	require.Zero(t, count("cancelled"))
}

// TestReasonRefusedAlike: a reason no action takes is refused with exit
// status 2 naming --reason, on a database and through a server alike,
// whatever the action.
func TestReasonRefusedAlike(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "weft.db")
	requireCode(t, 0, weftCLI(t, "--db", db, "submit", "../../examples/hello.yaml"))
	long := strings.Repeat("x", store.MaxReason+1)
	for _, args := range [][]string{
		{"cancel", "1", "--reason", long},
		{"cancel", "1", "--reason", "a\xffb"},
		{"retry", "1", "--reason", long},
		{"cancel", "--all", "--reason", long},
		{"pause", "examples", "--reason", long},
	} {
		r := weftCLI(t, append(args, "--db", db)...)
		requireCode(t, exitUsage, r)
		require.Contains(t, r.stderr, "--reason: must", args[:2])
	}
	r := weftCLI(t, "--db", db, "tasks", "--json")
	requireCode(t, 0, r)
	require.Contains(t, r.stdout, `"state": "pending"`, "nothing was cancelled")
}

// TestResolveResultRefusedAlike: a result no store keeps is refused by
// 'weft step resolve' on a database as over the API, naming where in
// --result it is.
func TestResolveResultRefusedAlike(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "weft.db")
	requireCode(t, 0, weftCLI(t, "--db", db, "submit", "../../examples/hello.yaml"))
	for result, says := range map[string]string{
		`{"a":"\u0000"}`:       "--result: a: contains a NUL character",
		`{"a":{"b":"\ud800"}}`: "--result: a.b: ",
		`["\u0000"]`:           "--result: [0]: ",
	} {
		r := weftCLI(t, "--db", db, "step", "resolve", "1", "--result", result)
		requireCode(t, exitUsage, r)
		require.Contains(t, r.stderr, says, result)
	}
}
