package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/wire"
)

// limitStep is the command of the exec steps of TestGlobalLimitHeldWhileKilled:
// it records when it starts and ends in the ledger ($1), with its pid, and
// works for 50ms in between.
const limitStep = `echo "start $(date +%s%N) $$" >> "$1"
sleep 0.05
echo "end $(date +%s%N) $$" >> "$1"
`

const limitWorkflow = `namespace: one
name: local
version: "1"
steps:
  - name: s
    handler: exec
    config: {command: ["/bin/sh", %q, %q]}
    retry: {max_attempts: 5, backoff: fixed, initial: 10ms}
`

// TestGlobalLimitHeldWhileKilled holds a namespace limit of 1, set at run
// time with 'weft limit', across two 'weft worker' processes, the engine of
// a 'weft serve' and a remote worker served by it, all on one PostgreSQL
// schema, submitted while paused and resumed at once everywhere, while
// worker processes are killed (SIGKILL, their running steps
// killed with them as in a machine crash) and replaced. Every run of a step
// records its start and end in a ledger: no two runs ever overlap, and
// every task completes.
func TestGlobalLimitHeldWhileKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the weft binary against PostgreSQL")
	}
	t.Parallel()
	_, url, s := freshSchema(t)
	bin, err := buildWeft()
	require.NoError(t, err)
	db := s.DB()
	dir := t.TempDir()
	ledger := filepath.Join(dir, "ledger")
	script := filepath.Join(dir, "step.sh")
	tpl := filepath.Join(dir, "local.yaml")
	require.NoError(t, os.WriteFile(script, []byte(limitStep), 0o644))
	require.NoError(t, os.WriteFile(tpl, fmt.Appendf(nil, limitWorkflow, script, ledger), 0o644))
	remoteTpl := filepath.Join(dir, "remote.yaml")
	require.NoError(t, os.WriteFile(remoteTpl, []byte("namespace: one\nname: remote\nversion: \"1\"\nsteps:\n  - name: s\n    handler: remote.work\n"), 0o644))

	run := func(args ...string) string {
		out, err := exec.Command(bin, append(args, "--db", url)...).CombinedOutput()
		require.NoError(t, err, "weft %v: %s", args, out)
		return string(out)
	}
	run("register", tpl)
	run("limit", "one", "--concurrency", "1", "--reason", "one at a time")
	srv := startServeProcess(t, url, "--insecure-no-auth")

	var mu sync.Mutex
	workers := map[int]*worker{}
	for range 2 {
		w := startWorker(t, bin, url)
		workers[w.cmd.Process.Pid] = w
	}

	// Submitted while paused, so that the work starts all at once.
	run("pause", "one")
	const localTasks, remoteTasks = 60, 20
	run("submit", tpl)
	for range localTasks - 1 {
		run("submit", "one/local")
	}
	for range remoteTasks {
		run("submit", remoteTpl)
	}

	// The remote worker: the same ledger, written from here.
	stopRemote := make(chan struct{})
	remoteDone := make(chan error, 1)
	go func() { remoteDone <- remoteLimitWorker(srv.url, ledger, stopRemote) }()
	run("resume", "one")
	defer func() {
		close(stopRemote)
		require.NoError(t, <-remoteDone)
	}()

	// Kill a worker twice while it runs a step, each time with its running
	// step (SIGSTOP first, so that it records nothing more), and start
	// another in its place.
	var kills []int64 // when each kill was done, in ns
	for len(kills) < 2 {
		var victim *worker
		var children []int
		// A worker whose step has started (its start is in the ledger)
		// and not ended.
		poll(t, 30*time.Second, func() string {
			var b strings.Builder
			for pid, w := range workers {
				fmt.Fprintf(&b, "--- worker %d:\n%s", pid, w.stderr)
			}
			return fmt.Sprintf("no worker ran a step to kill it in: %v\n%s", taskCounts(t, db), b.String())
		}, func() bool {
			open := runningInLedger(ledger)
			mu.Lock()
			defer mu.Unlock()
			for pid, w := range workers {
				for _, c := range childPIDs(pid) {
					if open[strconv.Itoa(c)] {
						victim, children = w, []int{c}
						return true
					}
				}
			}
			return false
		})
		pid := victim.cmd.Process.Pid
		require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
		// Freeze the step too, and make sure it had not ended meanwhile:
		// else let both go on and pick again.
		_ = syscall.Kill(-children[0], syscall.SIGSTOP)
		if !runningInLedger(ledger)[strconv.Itoa(children[0])] {
			_ = syscall.Kill(-children[0], syscall.SIGCONT)
			require.NoError(t, syscall.Kill(pid, syscall.SIGCONT))
			continue
		}
		for _, c := range childPIDs(pid) {
			_ = syscall.Kill(-c, syscall.SIGKILL) // the step's process group
		}
		require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
		_ = victim.cmd.Wait()
		kills = append(kills, time.Now().UnixNano())
		t.Logf("killed worker %d with its steps %v", pid, children)
		mu.Lock()
		delete(workers, pid)
		w := startWorker(t, bin, url)
		workers[w.cmd.Process.Pid] = w
		mu.Unlock()
	}

	poll(t, 90*time.Second, func() string {
		return fmt.Sprintf("tasks did not all complete: %v", taskCounts(t, db))
	}, func() bool {
		counts := taskCounts(t, db)
		require.Zero(t, counts[state.TaskFailed], "no task fails")
		return counts[state.TaskCompleted] == localTasks+remoteTasks
	})

	runs := limitRuns(t, ledger, kills)
	require.GreaterOrEqual(t, len(runs), localTasks+remoteTasks)
	sort.Slice(runs, func(i, j int) bool { return runs[i].start < runs[j].start })
	for i := 1; i < len(runs); i++ {
		require.GreaterOrEqual(t, runs[i].start, runs[i-1].end,
			"runs %s and %s overlap: the limit of 1 was exceeded", runs[i-1].id, runs[i].id)
	}
	killed := 0
	for _, r := range runs {
		if r.killed {
			killed++
		}
	}
	t.Logf("%d runs, one at a time, %d of them killed", len(runs), killed)
	require.Positive(t, killed, "the kills interrupted running steps")
	out := run("policies")
	require.Regexp(t, `one\s+no\s+1\s+1\s+0`, out)
}

// limitRun is one run of a step: from its start to its end, or to the kill
// that ended it.
type limitRun struct {
	id         string
	start, end int64
	killed     bool
}

// limitRuns reads the ledger's runs. A run that never ended was killed: it
// ends at the first kill after its start.
func limitRuns(t *testing.T, ledger string, kills []int64) []limitRun {
	t.Helper()
	data, err := os.ReadFile(ledger)
	require.NoError(t, err)
	byID := map[string]*limitRun{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		require.Len(t, f, 3, "ledger line %q", sc.Text())
		at, err := strconv.ParseInt(f[1], 10, 64)
		require.NoError(t, err)
		r := byID[f[2]]
		if r == nil {
			r = &limitRun{id: f[2], end: -1}
			byID[f[2]] = r
		}
		switch f[0] {
		case "start":
			r.start = at
		case "end":
			r.end = at
		}
	}
	out := make([]limitRun, 0, len(byID))
	for _, r := range byID {
		if r.end < 0 {
			for _, k := range kills {
				if k > r.start {
					r.end, r.killed = k, true
					break
				}
			}
			require.True(t, r.killed, "run %s never ended and no kill followed its start", r.id)
		}
		out = append(out, *r)
	}
	return out
}

// runningInLedger returns the ids of the runs that started and have not
// ended.
func runningInLedger(ledger string) map[string]bool {
	data, _ := os.ReadFile(ledger)
	open := map[string]bool{}
	for line := range strings.SplitSeq(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		open[f[2]] = f[0] == "start"
	}
	return open
}

// childPIDs returns the pids of the processes whose parent is pid.
func childPIDs(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid …; comm may hold spaces: read after ')'.
		rest := stat[bytes.LastIndexByte(stat, ')')+1:]
		f := strings.Fields(string(rest))
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, child)
		}
	}
	return out
}

// remoteLimitWorker runs the steps of handler remote.work through the
// server's worker protocol until stop closes, recording each run in the
// ledger.
func remoteLimitWorker(base, ledger string, stop <-chan struct{}) error {
	call := func(path string, body, out any) error {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		resp, err := http.Post(base+path, "application/json", bytes.NewReader(b))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode >= 300 {
			return fmt.Errorf("%s: status %d", path, resp.StatusCode)
		}
		if out != nil {
			return json.NewDecoder(resp.Body).Decode(out)
		}
		return nil
	}
	var reg wire.WorkerRegistered
	if err := call("/v1/workers", wire.RegisterWorker{Name: "limit-test", Handlers: []string{"remote.work"}}, &reg); err != nil {
		return err
	}
	f, err := os.OpenFile(ledger, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	for {
		select {
		case <-stop:
			return nil
		default:
		}
		var got wire.ClaimResponse
		if err := call("/v1/workers/"+reg.WorkerID+"/claim", wire.ClaimRequest{Handlers: []string{"remote.work"}, Max: 1, WaitMS: 100}, &got); err != nil {
			return err
		}
		for _, st := range got.Steps {
			id := fmt.Sprintf("remote-%d-%d", st.StepID, st.Attempt)
			fmt.Fprintf(f, "start %d %s\n", time.Now().UnixNano(), id)
			time.Sleep(20 * time.Millisecond) // the work
			fmt.Fprintf(f, "end %d %s\n", time.Now().UnixNano(), id)
			fence := st.Fence
			if err := call("/v1/workers/"+reg.WorkerID+"/complete", wire.Complete{Fence: &fence, Result: json.RawMessage(`null`)}, nil); err != nil {
				return err
			}
		}
	}
}
