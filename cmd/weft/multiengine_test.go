package main

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/internal/pgtesting"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/store/postgres"
	"github.com/weftrun/weft/weftdb"
	"github.com/weftrun/weft/workflow"
)

// freshSchema makes a new schema for one test. It returns its name, the
// server's URL selecting it with search_path, and a store opened with that
// URL alone, which proves that postgres.Open honours the URL's search_path
// (what the weft CLI relies on). The schema is dropped when the test ends.
func freshSchema(t *testing.T) (schema, schemaURL string, s postgres.Store) {
	t.Helper()
	url := pgtesting.URL(t)
	schema = pgtesting.SchemaName("mt")
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	schemaURL = url + sep + "search_path=" + schema

	ctx := context.Background()
	s, err := postgres.Open(ctx, schemaURL, postgres.Options{MaxConns: 4})
	require.NoError(t, err)
	t.Cleanup(func() {
		_, err := s.DB().ExecContext(context.Background(), `DROP SCHEMA `+schema+` CASCADE`)
		s.Close()
		require.NoError(t, err, "drop schema %s", schema)
	})
	var current string
	require.NoError(t, s.DB().QueryRowContext(ctx, `SELECT current_schema()`).Scan(&current))
	require.Equal(t, schema, current, "postgres.Open takes the schema from the URL's search_path")
	var tables int
	require.NoError(t, s.DB().QueryRowContext(ctx,
		`SELECT count(*) FROM information_schema.tables WHERE table_schema = $1 AND table_name IN ('tasks', 'steps', 'audit', 'engines')`,
		schema).Scan(&tables))
	require.Equal(t, 4, tables, "weft's tables were created in %s", schema)
	return schema, schemaURL, s
}

// poll checks cond every few milliseconds until it holds, failing the test
// with what() once the deadline passes.
func poll(t *testing.T, timeout time.Duration, what func() string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s: %s", timeout, what())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// taskCounts returns the number of tasks in each state.
func taskCounts(t *testing.T, db *sql.DB) map[state.Task]int {
	t.Helper()
	rows, err := db.QueryContext(context.Background(), `SELECT state, count(*) FROM tasks GROUP BY state`)
	require.NoError(t, err)
	defer rows.Close()
	out := map[state.Task]int{}
	for rows.Next() {
		var st string
		var n int
		require.NoError(t, rows.Scan(&st, &n))
		out[state.Task(st)] = n
	}
	require.NoError(t, rows.Err())
	return out
}

// allTasks lists every task of the store, page by page.
func allTasks(t *testing.T, s store.Store) []store.Task {
	t.Helper()
	const page = 200
	var out []store.Task
	var before int64
	for {
		list, err := s.ListTasks(context.Background(), store.TaskFilter{BeforeID: before, Limit: page})
		require.NoError(t, err)
		out = append(out, list...)
		if len(list) < page {
			return out
		}
		before = list[len(list)-1].ID
	}
}

// multiStep is the command of every step of multiWorkflow: it appends
// "TASK STEP ATTEMPT/PPID" to the ledger ($1) when it starts — the attempt
// and the parent pid (the worker that runs it) share one field so that
// ledgerRuns reads the lines — then b and c work for 50-90ms and print
// their result; d prints its stdin, the step context, so that its result
// shows the dependencies' results it was given.
const multiStep = `echo "$WEFT_TASK_ID $WEFT_STEP $WEFT_ATTEMPT/$PPID" >> "$1"
case $WEFT_STEP in
b | c) sleep "0.0$((5 + WEFT_TASK_ID % 5))" ;;
d) exec cat ;;
esac
printf '{"%s": %s}\n' "$WEFT_STEP" "$WEFT_TASK_ID"
`

// multiWorkflow is a diamond of exec steps (a → b, c → d). The arguments are
// the script and the ledger. d has a higher priority so that each task
// finishes as soon as it can instead of after every b and c: tasks complete
// steadily while long steps run.
const multiWorkflow = `namespace: multi
name: diamond
version: "1"
steps:
  - name: a
    handler: exec
    config: {command: ["/bin/sh", %[1]q, %[2]q]}
    retry: {max_attempts: 5, backoff: fixed, initial: 10ms}
  - name: b
    handler: exec
    depends_on: [a]
    config: {command: ["/bin/sh", %[1]q, %[2]q]}
    retry: {max_attempts: 5, backoff: fixed, initial: 10ms}
  - name: c
    handler: exec
    depends_on: [a]
    config: {command: ["/bin/sh", %[1]q, %[2]q]}
    retry: {max_attempts: 5, backoff: fixed, initial: 10ms}
  - name: d
    handler: exec
    depends_on: [b, c]
    priority: 1
    config: {command: ["/bin/sh", %[1]q, %[2]q]}
    retry: {max_attempts: 5, backoff: fixed, initial: 10ms}
`

// ledgerPIDs returns, by "task/step", the pids of the processes that ran
// each execution recorded in the ledger.
func ledgerPIDs(t *testing.T, ledger string) map[string][]int {
	t.Helper()
	data, err := os.ReadFile(ledger)
	require.NoError(t, err)
	out := map[string][]int{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		require.Len(t, fields, 3, "ledger line %q", sc.Text())
		_, ppid, ok := strings.Cut(fields[2], "/")
		require.True(t, ok, "ledger line %q", sc.Text())
		pid, err := strconv.Atoi(ppid)
		require.NoError(t, err, "ledger line %q", sc.Text())
		out[fields[0]+"/"+fields[1]] = append(out[fields[0]+"/"+fields[1]], pid)
	}
	require.NoError(t, sc.Err())
	return out
}

// runningByEngine returns how many steps each live engine holds running,
// with the engine's pid.
func runningByEngine(t *testing.T, db *sql.DB) (counts map[string]int, pids map[string]int) {
	t.Helper()
	rows, err := db.QueryContext(context.Background(), `SELECT e.id, e.pid, count(*) FROM steps s JOIN engines e ON e.id = s.engine_id
		WHERE s.state = 'running' AND e.state = 'live' GROUP BY e.id, e.pid`)
	require.NoError(t, err)
	defer rows.Close()
	counts, pids = map[string]int{}, map[string]int{}
	for rows.Next() {
		var id string
		var pid, n int
		require.NoError(t, rows.Scan(&id, &pid, &n))
		counts[id], pids[id] = n, pid
	}
	require.NoError(t, rows.Err())
	return counts, pids
}

// engineStates returns the state of every engine registered, by id, with
// its pid.
func engineStates(t *testing.T, db *sql.DB) (states map[string]string, pids map[string]int) {
	t.Helper()
	rows, err := db.QueryContext(context.Background(), `SELECT id, pid, state FROM engines`)
	require.NoError(t, err)
	defer rows.Close()
	states, pids = map[string]string{}, map[string]int{}
	for rows.Next() {
		var id, st string
		var pid int
		require.NoError(t, rows.Scan(&id, &pid, &st))
		states[id], pids[id] = st, pid
	}
	require.NoError(t, rows.Err())
	return states, pids
}

// TestMultiEngineKill runs three real worker processes on one PostgreSQL
// schema, SIGKILLs one while it holds running steps, and checks that the
// other two reclaim its work at once (same host, dead pid) and finish every
// task with each step's outcome recorded exactly once.
func TestMultiEngineKill(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the weft binary against PostgreSQL")
	}
	t.Parallel()
	schema, url, s := freshSchema(t)
	bin, err := buildWeft()
	require.NoError(t, err)
	ctx := context.Background()
	db := s.DB()

	dir := t.TempDir()
	ledger := filepath.Join(dir, "ledger")
	script := filepath.Join(dir, "step.sh")
	tpl := filepath.Join(dir, "diamond.yaml")
	require.NoError(t, os.WriteFile(script, []byte(multiStep), 0o644))
	require.NoError(t, os.WriteFile(tpl, fmt.Appendf(nil, multiWorkflow, script, ledger), 0o644))

	// Everything that opens the database (and so applies the schema) does it
	// before there is work to do: applying the schema while engines work can
	// deadlock with them (see the report of this test). The workers start
	// first and wait, idle, for the tasks.
	const tasks = 500
	byOption, err := postgres.Open(ctx, pgtesting.URL(t), postgres.Options{Schema: schema, MaxConns: 3})
	require.NoError(t, err)
	defer byOption.Close()
	subDB, err := weftdb.Open(ctx, url, weftdb.Options{})
	require.NoError(t, err)
	defer subDB.Close()
	sub, err := weft.New(subDB, weft.Config{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)

	workers := map[int]*worker{}
	for range 3 {
		w := startWorker(t, bin, url)
		workers[w.cmd.Process.Pid] = w
	}
	stderrs := func() string {
		// Only read once the workers have exited or the test is failing.
		var b strings.Builder
		for pid, w := range workers {
			fmt.Fprintf(&b, "--- worker %d:\n%s", pid, w.stderr)
		}
		return b.String()
	}
	poll(t, 30*time.Second, func() string {
		return fmt.Sprintf("the workers did not all register their engines:\n%s", stderrs())
	}, func() bool {
		states, pids := engineStates(t, db)
		live := 0
		for id, st := range states {
			if _, ours := workers[pids[id]]; ours && st == "live" {
				live++
			}
		}
		return live == len(workers)
	})

	// The CLI registers the template and submits the first task; the rest go
	// in one transaction from here.
	out, err := exec.Command(bin, "submit", tpl, "--db", url, "--input", `{"n": 0}`).CombinedOutput()
	require.NoError(t, err, "%s", out)
	_, err = strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	require.NoError(t, err, "weft submit prints the task id: %q", out)
	// The CLI wrote into the schema the URL named: a store opened with an
	// explicit Schema sees the workflow.
	_, err = byOption.GetWorkflow(ctx, "multi", "diamond", "1")
	require.NoError(t, err, "weft submit registered the workflow in schema %s", schema)
	subs := make([]weft.Submission, tasks-1)
	for i := range subs {
		subs[i] = weft.Submission{Workflow: "multi/diamond", Input: map[string]int{"n": i + 1}}
	}
	_, err = sub.SubmitMany(ctx, subs)
	require.NoError(t, err)
	began := time.Now()

	// Wait until a good part of the work is done, then kill the worker that
	// leads maintenance while it holds running steps: its steps must be
	// reclaimed and its lease taken over.
	var victim string
	var victimPID int
	poll(t, 30*time.Second, func() string {
		return fmt.Sprintf("the leader held no running steps after 100 tasks completed: %v", taskCounts(t, db))
	}, func() bool {
		if taskCounts(t, db)[state.TaskCompleted] < 100 {
			return false
		}
		leader := maintenanceLeader(t, db)
		counts, pids := runningByEngine(t, db)
		if _, ours := workers[pids[leader]]; !ours || counts[leader] == 0 {
			return false
		}
		victim, victimPID = leader, pids[leader]
		return true
	})
	killed := workers[victimPID]
	require.NoError(t, killed.cmd.Process.Signal(syscall.SIGKILL))
	// Reap the process: until then its pid exists (a zombie) and the others
	// cannot tell that it died.
	_ = killed.cmd.Wait()
	killedAt := time.Now()
	doneAtKill := taskCounts(t, db)[state.TaskCompleted]
	t.Logf("killed worker %d (engine %s) after %s with %d/%d tasks completed", victimPID, victim, killedAt.Sub(began).Round(time.Millisecond), doneAtKill, tasks)

	poll(t, 120*time.Second, func() string {
		return fmt.Sprintf("tasks did not all complete: %v\n%s", taskCounts(t, db), stderrs())
	}, func() bool {
		counts := taskCounts(t, db)
		for st, n := range counts {
			if st.Terminal() && st != state.TaskCompleted {
				t.Fatalf("%d tasks ended %s\n%s", n, st, stderrs())
			}
		}
		return counts[state.TaskCompleted] == tasks
	})
	t.Logf("all %d tasks completed %s after the kill (%s in all)", tasks, time.Since(killedAt).Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
	poll(t, 30*time.Second, func() string { return "no survivor took the maintenance lease over" }, func() bool {
		l := maintenanceLeader(t, db)
		return l != "" && l != victim
	})
	t.Logf("engine %s leads maintenance after the kill", maintenanceLeader(t, db))

	// The survivors stop cleanly.
	var survivors []string
	for pid, w := range workers {
		if w == killed {
			continue
		}
		require.NoError(t, w.cmd.Process.Signal(syscall.SIGTERM))
		require.NoError(t, w.cmd.Wait(), "worker %d exits cleanly on SIGTERM:\n%s", pid, w.stderr)
	}
	// Every worker has exited: their logs can be read. Errors the engines
	// recovered from (a write retried) are reported, not failed on.
	for pid, w := range workers {
		for line := range strings.Lines(w.stderr.String()) {
			if strings.Contains(line, "level=ERROR") {
				t.Logf("worker %d logged: %s", pid, strings.TrimSpace(line))
			}
		}
	}
	states, pids := engineStates(t, db)
	require.Len(t, states, 3, "one engine per worker")
	for id, st := range states {
		require.Contains(t, workers, pids[id], "engine %s belongs to a worker", id)
		if id == victim {
			require.Equal(t, "dead", st, "the killed engine was declared dead")
			continue
		}
		require.Equal(t, "stopped", st, "engine %s stopped on SIGTERM", id)
		survivors = append(survivors, id)
	}
	require.Len(t, survivors, 2)

	// Every step completed once; d saw b's and c's results; the killed
	// engine's running steps were reclaimed and finished by the others.
	list := allTasks(t, s)
	require.Len(t, list, tasks)
	completers := map[string]int{}     // engine id -> steps completed
	reclaimedKeys := map[string]bool{} // task/step
	var firstReclaim time.Time
	takenOver := 0 // started by the victim, completed by another
	for _, task := range list {
		full, err := s.GetTask(ctx, task.ID)
		require.NoError(t, err)
		require.Equal(t, state.TaskCompleted, full.State, "task %d", task.ID)
		require.Len(t, full.Steps, 4)
		results := map[string]json.RawMessage{}
		for _, st := range full.Steps {
			require.Equal(t, state.StepCompleted, st.State, "task %d step %s", task.ID, st.Name)
			results[st.Name] = st.Result
		}
		for _, name := range []string{"a", "b", "c"} {
			require.JSONEq(t, fmt.Sprintf(`{%q: %d}`, name, task.ID), string(results[name]), "task %d step %s", task.ID, name)
		}
		var d struct {
			TaskID int64                      `json:"task_id"`
			Step   string                     `json:"step"`
			Deps   map[string]json.RawMessage `json:"deps"`
		}
		require.NoError(t, json.Unmarshal(results["d"], &d), "task %d: d prints its step context: %s", task.ID, results["d"])
		require.Equal(t, task.ID, d.TaskID)
		require.Equal(t, "d", d.Step)
		require.Len(t, d.Deps, 2, "task %d: d sees exactly its dependencies", task.ID)
		require.JSONEq(t, string(results["b"]), string(d.Deps["b"]), "task %d: d saw b's result", task.ID)
		require.JSONEq(t, string(results["c"]), string(d.Deps["c"]), "task %d: d saw c's result", task.ID)

		audit, err := s.Audit(ctx, task.ID)
		require.NoError(t, err)
		completions := map[string]int{}
		byVictim := map[string]bool{}
		reclaimed := map[string]bool{}
		for _, e := range audit {
			if e.Step == "" {
				continue
			}
			switch {
			case e.To == string(state.StepRunning):
				require.NotEmpty(t, e.EngineID, "a claim names its engine")
				if e.EngineID == victim {
					byVictim[e.Step] = true
				}
			case e.From == string(state.StepRunning) && e.To == string(state.StepReady):
				require.Contains(t, e.Reason, "lease lapsed", "task %d step %s: the only way back to ready here", task.ID, e.Step)
				require.Contains(t, e.Reason, victim, "task %d step %s: only the killed engine's steps are reclaimed", task.ID, e.Step)
				require.Contains(t, survivors, e.EngineID, "a survivor reclaimed task %d step %s", task.ID, e.Step)
				require.True(t, byVictim[e.Step], "task %d step %s was reclaimed from the killed engine, which held it", task.ID, e.Step)
				reclaimed[e.Step] = true
				if firstReclaim.IsZero() || e.At.Before(firstReclaim) {
					firstReclaim = e.At
				}
				reclaimedKeys[fmt.Sprintf("%d/%s", task.ID, e.Step)] = true
			case e.To == string(state.StepCompleted):
				require.Equal(t, string(state.StepRunning), e.From)
				completions[e.Step]++
				completers[e.EngineID]++
				if reclaimed[e.Step] {
					require.Contains(t, survivors, e.EngineID, "task %d step %s: a reclaimed step is completed by a survivor", task.ID, e.Step)
					takenOver++
				}
			}
		}
		require.Equal(t, map[string]int{"a": 1, "b": 1, "c": 1, "d": 1}, completions, "task %d: every outcome recorded once", task.ID)
	}
	t.Logf("completions by engine: %v; %d steps reclaimed from the killed engine", completers, len(reclaimedKeys))
	t.Logf("the first step was reclaimed %s after the kill", firstReclaim.Sub(killedAt).Round(time.Millisecond))
	require.GreaterOrEqual(t, len(completers), 2, "several engines completed steps: %v", completers)
	for _, id := range survivors {
		require.Positive(t, completers[id], "survivor %s completed steps", id)
	}
	require.Positive(t, takenOver, "a step started by the killed engine was completed by another")

	// At-least-once execution: nothing ran more than twice, and only a
	// step reclaimed from the killed worker ran twice, once under it.
	runs := ledgerRuns(t, ledger)
	require.Len(t, runs, tasks*4, "every step ran")
	ran := ledgerPIDs(t, ledger)
	for key, pids := range ran {
		for i, pid := range pids {
			// A step whose shell started as the killed worker died was
			// orphaned before it read its parent: init adopted it. Only
			// the victim dies here.
			if pid == 1 {
				ran[key][i] = victimPID
			}
		}
	}
	reran := 0
	for key, n := range runs {
		require.LessOrEqual(t, n, 2, "%s ran %d times", key, n)
		for _, pid := range ran[key] {
			require.Contains(t, workers, pid, "%s ran under a worker", key)
		}
		if n == 2 {
			reran++
			require.True(t, reclaimedKeys[key], "%s ran twice but was never reclaimed", key)
			require.Contains(t, ran[key], victimPID, "%s ran twice, once under the killed worker", key)
		}
	}
	t.Logf("%d steps ran twice", reran)
	require.LessOrEqual(t, reran, len(reclaimedKeys))
}

// TestNamespaceCapAcrossEngines runs three engines, each with its own
// connection pool, on one schema with a cap of 2 on a namespace: together
// they never run more than two of its steps at once, and they do use both.
func TestNamespaceCapAcrossEngines(t *testing.T) {
	t.Parallel()
	schema, _, admin := freshSchema(t)
	url := pgtesting.URL(t)
	ctx := context.Background()

	var running, peak, ran atomic.Int64
	handler := func(ctx context.Context, a *weft.Attempt) (any, error) {
		if ns, _, _ := strings.Cut(a.Workflow, "/"); ns != "capped" {
			return nil, weft.Permanent(fmt.Errorf("unexpected workflow %s", a.Workflow))
		}
		n := running.Add(1)
		defer running.Add(-1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		ran.Add(1)
		select {
		case <-time.After(30 * time.Millisecond): // the work
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
		return map[string]int64{"n": n}, nil
	}

	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	engines := make([]*weft.Engine, 3)
	for i := range engines {
		s, err := postgres.Open(ctx, url, postgres.Options{Schema: schema, MaxConns: 8})
		require.NoError(t, err)
		t.Cleanup(func() { s.Close() })
		e, err := weft.New(s, weft.Config{
			Concurrency:       4,
			HeartbeatInterval: 100 * time.Millisecond,
			LeaseTTL:          time.Second,
			PollInterval:      20 * time.Millisecond,
			Logger:            quiet,
		})
		require.NoError(t, err)
		e.Handle("h", handler)
		engines[i] = e
	}
	require.NoError(t, engines[0].Register(ctx, workflow.New("capped", "w", "1").Step("s", "h")))
	two := 2
	_, err := engines[0].SetLimits(ctx, "capped", weft.Limits{Concurrency: &two}, weft.Operator{Actor: "test"})
	require.NoError(t, err)
	const tasks = 40
	subs := make([]weft.Submission, tasks)
	for i := range subs {
		subs[i] = weft.Submission{Workflow: "capped/w", Input: map[string]int{"i": i}}
	}
	_, err = engines[0].SubmitMany(ctx, subs)
	require.NoError(t, err)

	for _, e := range engines {
		require.NoError(t, e.Start(ctx))
		t.Cleanup(func() {
			stopCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			require.NoError(t, e.Stop(stopCtx))
		})
	}
	poll(t, 30*time.Second, func() string {
		return fmt.Sprintf("tasks did not all complete: %v", taskCounts(t, admin.DB()))
	}, func() bool {
		counts := taskCounts(t, admin.DB())
		require.Zero(t, counts[state.TaskFailed], "no task fails")
		return counts[state.TaskCompleted] == tasks
	})
	require.Equal(t, int64(tasks), ran.Load(), "each task's step ran once")
	require.LessOrEqual(t, peak.Load(), int64(2), "the cap holds across engines")
	require.Equal(t, int64(2), peak.Load(), "the engines together use the whole cap")

	// The audit log shows which engines ran the steps.
	claimers := map[string]int{}
	for _, task := range allTasks(t, admin) {
		audit, err := admin.Audit(ctx, task.ID)
		require.NoError(t, err)
		for _, e := range audit {
			if e.Step != "" && e.To == string(state.StepCompleted) {
				claimers[e.EngineID]++
			}
		}
	}
	t.Logf("completions by engine: %v", claimers)
	total := 0
	for _, n := range claimers {
		total += n
	}
	require.Equal(t, tasks, total)
}

// maintenanceLeader returns the engine holding the maintenance lease, or "".
func maintenanceLeader(t *testing.T, db *sql.DB) string {
	t.Helper()
	var id string
	err := db.QueryRowContext(context.Background(), `SELECT engine_id FROM leaders WHERE role = 'maintenance'`).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return ""
	}
	require.NoError(t, err)
	return id
}
