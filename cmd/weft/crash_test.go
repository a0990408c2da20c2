package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/store/sqlite"
)

// weftBinDir is the directory buildWeft built the CLI in ("" until it
// did), removed by TestMain after the tests.
var weftBinDir string

func TestMain(m *testing.M) {
	code := m.Run()
	if weftBinDir != "" {
		os.RemoveAll(weftBinDir)
	}
	os.Exit(code)
}

// buildWeft compiles the CLI once per test binary run, stamped with the
// VCS revision when it is built from a checkout (whatever GOFLAGS says).
var buildWeft = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "weft-bin-")
	if err != nil {
		return "", err
	}
	weftBinDir = dir
	bin := filepath.Join(dir, "weft")
	out, err := exec.Command("go", "build", "-buildvcs=auto", "-o", bin, ".").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
})

// crashWorkflow is a diamond of exec steps. Each step writes a line to the
// ledger when it starts (so re-executions are visible) and then works for a
// while, so that a kill lands while steps run.
const crashWorkflow = `namespace: crash
name: diamond
version: "1"
steps:
  - name: a
    handler: exec
    config: {command: ["/bin/sh", "-c", "echo \"$WEFT_TASK_ID a $WEFT_ATTEMPT\" >> %[1]s; sleep 0.2; echo '{\"a\": 1}'"]}
    retry: {max_attempts: 5, backoff: fixed, initial: 10ms}
  - name: b
    handler: exec
    depends_on: [a]
    config: {command: ["/bin/sh", "-c", "echo \"$WEFT_TASK_ID b $WEFT_ATTEMPT\" >> %[1]s; sleep 1; echo '{\"b\": 2}'"]}
    retry: {max_attempts: 5, backoff: fixed, initial: 10ms}
  - name: c
    handler: exec
    depends_on: [a]
    config: {command: ["/bin/sh", "-c", "echo \"$WEFT_TASK_ID c $WEFT_ATTEMPT\" >> %[1]s; sleep 1; echo '{\"c\": 3}'"]}
    retry: {max_attempts: 5, backoff: fixed, initial: 10ms}
  - name: d
    handler: exec
    depends_on: [b, c]
    config: {command: ["/bin/sh", "-c", "echo \"$WEFT_TASK_ID d $WEFT_ATTEMPT\" >> %[1]s; cat"]}
    retry: {max_attempts: 5, backoff: fixed, initial: 10ms}
`

type worker struct {
	cmd    *exec.Cmd
	stderr *bytes.Buffer
}

func startWorker(t *testing.T, bin, db string) *worker {
	t.Helper()
	w := &worker{cmd: exec.Command(bin, "worker", "--db", db, "--concurrency", "6"), stderr: &bytes.Buffer{}}
	w.cmd.Stderr = w.stderr
	require.NoError(t, w.cmd.Start())
	t.Cleanup(func() {
		if w.cmd.ProcessState == nil {
			_ = w.cmd.Process.Kill()
			_ = w.cmd.Wait()
		}
	})
	return w
}

// TestCrashRecovery kills a real worker process with SIGKILL while steps run,
// starts a new one, and checks that every task completes with each step's
// outcome recorded exactly once.
func TestCrashRecovery(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the weft binary")
	}
	t.Parallel()
	bin, err := buildWeft()
	require.NoError(t, err)
	dir := t.TempDir()
	db := filepath.Join(dir, "weft.db")
	ledger := filepath.Join(dir, "ledger")
	tpl := filepath.Join(dir, "diamond.yaml")
	require.NoError(t, os.WriteFile(tpl, fmt.Appendf(nil, crashWorkflow, ledger), 0o644))

	const tasks = 6
	for i := range tasks {
		out, err := exec.Command(bin, "submit", tpl, "--db", db, "--input", fmt.Sprintf(`{"n": %d}`, i)).CombinedOutput()
		require.NoError(t, err, "%s", out)
	}

	ctx := context.Background()
	s, err := sqlite.Open(ctx, db, sqlite.Options{})
	require.NoError(t, err)
	defer s.Close()

	first := startWorker(t, bin, db)
	// Kill it once at least four long steps (b, c) have started their work:
	// their outcomes are not yet recorded and the database shows them running
	// under its lease.
	require.Eventually(t, func() bool { return countSteps(t, s, "b", "c") >= 4 && len(ledgerRuns(t, ledger, "b", "c")) >= 4 },
		30*time.Second, 10*time.Millisecond, "the first worker never ran the long steps:\n%s", first.stderr)
	killedLong := ledgerRuns(t, ledger, "b", "c")
	require.NoError(t, first.cmd.Process.Signal(syscall.SIGKILL))
	_ = first.cmd.Wait()
	require.Positive(t, countSteps(t, s, "a", "b", "c", "d"), "steps are left running by the dead worker")

	second := startWorker(t, bin, db)
	require.Eventually(t, func() bool {
		list, err := s.ListTasks(ctx, store.TaskFilter{State: state.TaskCompleted})
		require.NoError(t, err)
		return len(list) == tasks
	}, 60*time.Second, 20*time.Millisecond, "tasks did not all complete after the restart:\n%s", second.stderr)
	require.NoError(t, second.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, second.cmd.Wait(), "the worker exits cleanly on SIGTERM:\n%s", second.stderr)

	reclaimed := 0
	list, err := s.ListTasks(ctx, store.TaskFilter{})
	require.NoError(t, err)
	for _, task := range list {
		full, err := s.GetTask(ctx, task.ID)
		require.NoError(t, err)
		require.Equal(t, state.TaskCompleted, full.State)
		require.JSONEq(t, `{"b": 2}`, string(full.Steps[1].Result))
		audit, err := s.Audit(ctx, task.ID)
		require.NoError(t, err)
		completions := map[string]int{}
		for _, e := range audit {
			if e.Step != "" && e.To == string(state.StepCompleted) {
				completions[e.Step]++
			}
			if e.From == string(state.StepRunning) && e.To == string(state.StepReady) && strings.Contains(e.Reason, "lease lapsed") {
				reclaimed++
			}
		}
		require.Equal(t, map[string]int{"a": 1, "b": 1, "c": 1, "d": 1}, completions, "task %d: every outcome recorded once", task.ID)
		d := full.Steps[3]
		require.Equal(t, "d", d.Name)
		require.Contains(t, string(d.Result), `"b":{"b":2}`, "d saw its dependencies' results")
	}
	require.Positive(t, reclaimed, "the kill interrupted running steps, which were reclaimed")

	// At-least-once execution: the long steps the kill interrupted ran
	// again, and only reclaimed steps ran twice (a step claimed just before
	// the kill may be reclaimed without its command having started).
	runs := ledgerRuns(t, ledger)
	require.Len(t, runs, tasks*4)
	reran := 0
	for key, n := range runs {
		require.LessOrEqual(t, n, 2, key)
		if n == 2 {
			reran++
		}
	}
	for key := range killedLong {
		if runs[key] == 1 {
			// It finished in the instant between the check and the kill.
			continue
		}
		require.Equal(t, 2, runs[key], key)
	}
	require.GreaterOrEqual(t, reran, 1)
	require.LessOrEqual(t, reran, reclaimed, "only reclaimed steps ran twice")
}

// ledgerRuns counts the ledger's lines by "task/step", for the given steps
// (all when none are given).
func ledgerRuns(t *testing.T, ledger string, steps ...string) map[string]int {
	t.Helper()
	runs := map[string]int{}
	data, err := os.ReadFile(ledger)
	if errors.Is(err, os.ErrNotExist) {
		return runs
	}
	require.NoError(t, err)
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 3 {
			continue // a line being written
		}
		if len(steps) == 0 || slices.Contains(steps, fields[1]) {
			runs[fields[0]+"/"+fields[1]]++
		}
	}
	return runs
}

// countSteps counts running steps with the given names across all tasks.
func countSteps(t *testing.T, s store.Store, names ...string) int {
	t.Helper()
	list, err := s.ListTasks(context.Background(), store.TaskFilter{})
	require.NoError(t, err)
	n := 0
	for _, task := range list {
		full, err := s.GetTask(context.Background(), task.ID)
		require.NoError(t, err)
		for _, st := range full.Steps {
			for _, name := range names {
				if st.Name == name && st.State == state.StepRunning {
					n++
				}
			}
		}
	}
	return n
}
