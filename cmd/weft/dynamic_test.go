package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/internal/taskview"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/store/sqlite"
)

func example(name string) string { return filepath.Join("..", "..", "examples", name) }

func TestOrderApprovalExampleSmallOrder(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "weft.db")
	r := weftCLI(t, "run", example("order-approval.yaml"), "--db", db, "--input", `{"order": 7, "amount": 120}`, "--json")
	requireCode(t, exitOK, r)
	task := decodeTask(t, r.stdout)
	require.Equal(t, state.TaskCompleted, task.State)
	require.Equal(t, state.StepCompleted, stepByName(t, task, "auto_approve").State)
	require.Equal(t, state.StepSkipped, stepByName(t, task, "manual_review").State)
	require.Equal(t, state.StepCompleted, stepByName(t, task, "fulfil").State)
	require.Equal(t, state.StepSkipped, stepByName(t, task, "reject").State)
}

func TestOrderApprovalExampleWaitsForSignal(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		payload        string
		fulfil, reject state.Step
	}{
		{`{"approved": true, "by": "ada"}`, state.StepCompleted, state.StepSkipped},
		{`{"approved": false, "by": "ada"}`, state.StepSkipped, state.StepCompleted},
	} {
		t.Run(tt.payload, func(t *testing.T) {
			t.Parallel()
			db := filepath.Join(t.TempDir(), "weft.db")
			var stdout, stderr syncBuffer
			done := make(chan int, 1)
			go func() {
				done <- run(t.Context(), []string{"run", example("order-approval.yaml"), "--db", db, "--input", `{"order": 8, "amount": 5000}`},
					strings.NewReader(""), &stdout, &stderr)
			}()
			// weft run says how to send the signal while the step waits.
			hint := regexp.MustCompile(`send it with: weft signal (\d+) approval --payload '\{\.\.\.\}' --db (\S+)`)
			var m []string
			require.Eventually(t, func() bool { m = hint.FindStringSubmatch(stdout.String()); return m != nil },
				30*time.Second, 10*time.Millisecond, "no signal hint:\n%s\n%s", stdout.String(), stderr.String())
			require.Equal(t, taskview.ShellQuote(db), m[2])
			r := weftCLI(t, "signal", m[1], "approval", "--payload", tt.payload, "--db", db)
			requireCode(t, exitOK, r)
			require.Equal(t, "signal approval delivered to task "+m[1]+"\n", r.stdout)
			select {
			case code := <-done:
				require.Equal(t, exitOK, code, "%s\n%s", stdout.String(), stderr.String())
			case <-time.After(30 * time.Second):
				t.Fatalf("weft run did not finish after the signal:\n%s", stdout.String())
			}
			r = weftCLI(t, "task", m[1], "--db", db, "--json")
			requireCode(t, exitOK, r)
			task := decodeTask(t, r.stdout)
			require.Equal(t, state.TaskCompleted, task.State)
			require.JSONEq(t, `{"signal": "approval", "payload": `+tt.payload+`}`, string(stepByName(t, task, "manual_review").Result))
			require.Equal(t, tt.fulfil, stepByName(t, task, "fulfil").State)
			require.Equal(t, tt.reject, stepByName(t, task, "reject").State)
		})
	}
}

func TestSignalCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "weft.db")
	tpl := writeFile(t, dir, "wait.yaml", `namespace: t
name: wait
version: "1"
steps:
  - name: first
    handler: exec
    config: {command: [/bin/sh, -c, "echo 1"]}
  - name: gate
    type: signal
    depends_on: [first]
`)
	r := weftCLI(t, "submit", tpl, "--db", db)
	requireCode(t, exitOK, r)
	id := strings.TrimSpace(r.stdout)
	_, err := strconv.Atoi(id)
	require.NoError(t, err, r.stdout)
	// The step does not wait yet (no worker ran "first"): the signal is kept.
	r = weftCLI(t, "signal", id, "gate", "--payload", `{"ok": 1}`, "--db", db)
	requireCode(t, exitOK, r)
	require.Equal(t, "signal gate kept for task "+id+": no step waits for it yet\n", r.stdout)

	for _, tt := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"signal", id, "gate", "--payload", "{bad"}, exitUsage, "--payload: not valid JSON"},
		{[]string{"signal", id, "bad name"}, exitUsage, "signal name"},
		{[]string{"signal", id, strings.Repeat("g", 129)}, exitUsage, "at most 128 bytes"},
		{[]string{"signal", "999", "gate"}, exitFailed, "task 999"},
		{[]string{"signal", id}, exitUsage, "accepts 2 arg(s)"},
	} {
		r := weftCLI(t, append(tt.args, "--db", db)...)
		requireCode(t, tt.code, r)
		require.Contains(t, r.stderr, tt.msg)
	}
}

func TestCSVImportExample(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "weft.db")
	r := weftCLI(t, "run", example("csv-import.yaml"), "--db", db, "--json", "--input",
		fmt.Sprintf(`{"file": %q, "size": 30}`, example("data/orders.csv")))
	requireCode(t, exitOK, r)
	task := decodeTask(t, r.stdout)
	require.Equal(t, state.TaskCompleted, task.State)
	// The sums of the amount column, computed here from the file.
	data, err := os.ReadFile(example("data/orders.csv"))
	require.NoError(t, err)
	var amounts []int
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n")[1:] {
		fields := strings.Split(line, ",")
		n, err := strconv.Atoi(fields[2])
		require.NoError(t, err)
		amounts = append(amounts, n)
	}
	sum := func(rows []int) (s int) {
		for _, n := range rows {
			s += n
		}
		return s
	}
	batches := (len(amounts) + 29) / 30
	require.Len(t, task.Steps, 2+batches, "one item per batch of 30 rows")
	last := fmt.Sprintf("split[%d]", batches-1)
	require.JSONEq(t, fmt.Sprintf(`{"rows": %d, "sum": %d}`, len(amounts)-30*(batches-1), sum(amounts[30*(batches-1):])),
		string(stepByName(t, task, last).Result))
	require.JSONEq(t, fmt.Sprintf(`{"batches": %d, "sum": %d}`, batches, sum(amounts)), string(stepByName(t, task, "total").Result))
	require.JSONEq(t, fmt.Sprintf(`{"row": 30, "sum": %d}`, sum(amounts[:30])), string(stepByName(t, task, "split[0]").Checkpoint),
		"each item checkpointed up to its last row")
}

// checkpointWorkflow counts rows 1 to 40, one every 50ms, saving a
// checkpoint after each on the control channel. It writes to the ledger the
// row each attempt starts from.
const checkpointWorkflow = `namespace: crash
name: checkpoint
version: "1"
steps:
  - name: count
    handler: exec
    retry: {max_attempts: 5, backoff: fixed, initial: 10ms}
    config:
      command:
        - /bin/sh
        - -c
        - |
          cp=$(sed -n 's/.*"checkpoint":{"row":\([0-9]*\)}.*/\1/p')
          row=$(( ${cp:-0} + 1 ))
          echo "start $row" >> %[1]s
          while [ $row -le 40 ]; do
            sleep 0.05
            printf '{"checkpoint": {"row": %%d}}\n' $row >&3
            row=$((row + 1))
          done
          echo '{"rows": 40}'
`

// TestCheckpointResumesAfterKill kills a worker with SIGKILL while a step
// that checkpoints runs; the next worker's attempt starts from the last
// checkpoint rather than from the beginning.
func TestCheckpointResumesAfterKill(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the weft binary")
	}
	t.Parallel()
	bin, err := buildWeft()
	require.NoError(t, err)
	dir := t.TempDir()
	db := filepath.Join(dir, "weft.db")
	ledger := filepath.Join(dir, "ledger")
	tpl := filepath.Join(dir, "checkpoint.yaml")
	require.NoError(t, os.WriteFile(tpl, fmt.Appendf(nil, checkpointWorkflow, ledger), 0o644))
	out, err := exec.Command(bin, "submit", tpl, "--db", db).CombinedOutput()
	require.NoError(t, err, "%s", out)
	id, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	require.NoError(t, err)

	ctx := context.Background()
	s, err := sqlite.Open(ctx, db, sqlite.Options{})
	require.NoError(t, err)
	defer s.Close()
	checkpointRow := func() int {
		task, err := s.GetTask(ctx, id)
		require.NoError(t, err)
		var row int
		if cp := task.Steps[0].Checkpoint; cp != nil {
			_, _ = fmt.Sscanf(string(cp), `{"row":%d}`, &row)
		}
		return row
	}

	first := startWorker(t, bin, db)
	require.Eventually(t, func() bool { return checkpointRow() >= 5 }, 30*time.Second, 10*time.Millisecond,
		"no checkpoint saved:\n%s", first.stderr)
	require.NoError(t, first.cmd.Process.Signal(syscall.SIGKILL))
	_ = first.cmd.Wait()
	killedAt := checkpointRow()

	second := startWorker(t, bin, db)
	require.Eventually(t, func() bool { return taskState(ctx, db, id) == state.TaskCompleted }, 60*time.Second, 20*time.Millisecond,
		"the task did not complete after the restart:\n%s", second.stderr)
	require.NoError(t, second.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, second.cmd.Wait())

	starts, err := os.ReadFile(ledger)
	require.NoError(t, err)
	lines := strings.Fields(strings.ReplaceAll(string(starts), "start", ""))
	require.Len(t, lines, 2, "one start per attempt: %q", starts)
	require.Equal(t, "1", lines[0])
	resumed, err := strconv.Atoi(lines[1])
	require.NoError(t, err)
	require.Greater(t, resumed, 5, "the second attempt resumed after the checkpoint")
	require.GreaterOrEqual(t, resumed, killedAt+1, "from no earlier than the last checkpoint seen before the kill")
	task, err := s.GetTask(ctx, id)
	require.NoError(t, err)
	require.Equal(t, 2, task.Steps[0].Attempts)
	require.JSONEq(t, `{"rows": 40}`, string(task.Steps[0].Result))
}

// TestRetriedSignalStepWaitsAgain: a signal step whose wait timed out,
// retried by each CLI command that retries, waits for its signal again, and
// `weft signal` then completes the task.
func TestRetriedSignalStepWaitsAgain(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		retry func(taskID, stepID string) []string
	}{
		{"retry", func(taskID, _ string) []string { return []string{"retry", taskID} }},
		{"retry --attention", func(string, string) []string { return []string{"retry", "--attention"} }},
		{"step retry", func(_, stepID string) []string { return []string{"step", "retry", stepID} }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			db := filepath.Join(dir, "weft.db")
			tpl := writeFile(t, dir, "gate.yaml", `namespace: t
name: gate
version: "1"
steps:
  - name: approval
    type: signal
    signal: {name: go_live, timeout: 1h}
`)
			r := weftCLI(t, "submit", tpl, "--db", db)
			requireCode(t, exitOK, r)
			id := strings.TrimSpace(r.stdout)
			// An engine begins the wait, which times out: maintenance an
			// hour and a minute later.
			ctx := t.Context()
			s, err := sqlite.Open(ctx, db, sqlite.Options{})
			require.NoError(t, err)
			claimed, err := s.ClaimSteps(ctx, store.ClaimParams{EngineID: "test", Limit: 10, Handlers: []string{store.SignalHandler}, Now: time.Now()})
			require.NoError(t, err)
			require.Len(t, claimed, 1)
			_, err = s.CompleteSteps(ctx, []store.Outcome{{Fence: claimed[0].Fence, EngineID: "test", State: state.StepWaiting, BeginWait: true}})
			require.NoError(t, err)
			n, err := s.Promote(ctx, time.Now().Add(61*time.Minute), "test")
			require.NoError(t, err)
			require.Equal(t, 1, n)
			require.NoError(t, s.Close())
			r = weftCLI(t, "task", id, "--json", "--db", db)
			requireCode(t, exitOK, r)
			task := decodeTask(t, r.stdout)
			require.Equal(t, state.TaskFailed, task.State)

			requireCode(t, exitOK, weftCLI(t, append(tt.retry(id, strconv.FormatInt(task.Steps[0].ID, 10)), "--db", db)...))
			r = weftCLI(t, "signal", id, "go_live", "--db", db)
			requireCode(t, exitOK, r)
			require.Equal(t, "signal go_live delivered to task "+id+"\n", r.stdout)
			r = weftCLI(t, "task", id, "--json", "--db", db)
			requireCode(t, exitOK, r)
			require.Equal(t, state.TaskCompleted, decodeTask(t, r.stdout).State)
		})
	}
}
