package main

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestWorkerDrainKeepsLease stops a real `weft worker` with SIGTERM while
// it runs a step that works for several of its leases, and starts a second
// worker meanwhile. The first keeps heartbeating while it drains: the
// ledger shows one run of the step, the second worker never starts it, and
// no lease lapsed. It needs the lease settable from the CLI
// (engine.lease_ttl); it is skipped otherwise.
func TestWorkerDrainKeepsLease(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the weft binary")
	}
	t.Parallel()
	bin, err := buildWeft()
	require.NoError(t, err)
	if out, err := exec.Command(bin, "config").CombinedOutput(); err != nil || !strings.Contains(string(out), "engine.lease_ttl") {
		t.Skip("this weft cannot set the lease from the CLI (engine.lease_ttl)")
	}
	dir := t.TempDir()
	db := filepath.Join(dir, "weft.db")
	ledger := filepath.Join(dir, "ledger")
	// The step works for 15 s: seven 2 s leases, and longer than the
	// maintenance lease (10 s) that a draining leader would let lapse
	// before another engine reaps.
	tpl := writeFile(t, dir, "long.yaml", `namespace: drain
name: long
version: "1"
steps:
  - name: s
    handler: exec
    retry: {max_attempts: 5}
    config: {command: ["/bin/sh", "-c", "echo \"start $$\" >> `+ledger+`; sleep 15; echo \"end $$\" >> `+ledger+`"]}
`)
	out, err := exec.Command(bin, "submit", tpl, "--db", db).CombinedOutput()
	require.NoError(t, err, "%s", out)

	start := func() (*exec.Cmd, *syncBuffer, chan error) {
		w := exec.Command(bin, "worker", "--db", db, "--drain", "2m")
		w.Env = append(os.Environ(), "WEFT_LEASE_TTL=2s", "WEFT_HEARTBEAT_INTERVAL=500ms")
		stderr := &syncBuffer{}
		w.Stderr = stderr
		require.NoError(t, w.Start())
		exited := make(chan error, 1)
		go func() { exited <- w.Wait() }()
		t.Cleanup(func() { _ = w.Process.Kill() })
		return w, stderr, exited
	}
	first, firstErr, firstExit := start()
	poll(t, 30*time.Second, func() string { return "the step never started:\n" + firstErr.String() }, func() bool {
		return len(ledgerLines(t, ledger)) > 0
	})
	require.NoError(t, first.Process.Signal(syscall.SIGTERM))
	poll(t, 30*time.Second, func() string { return "the worker never began to stop:\n" + firstErr.String() }, func() bool {
		return strings.Contains(firstErr.String(), "worker stopping")
	})
	second, secondErr, secondExit := start()

	select {
	case err := <-firstExit:
		require.NoError(t, err, "the first worker exits cleanly:\n%s", firstErr.String())
	case <-time.After(90 * time.Second):
		t.Fatalf("the first worker did not stop:\n%s", firstErr.String())
	}
	poll(t, 30*time.Second, func() string { return "the task did not complete:\n" + secondErr.String() }, func() bool {
		r := weftCLI(t, "task", "1", "--json", "--db", db)
		return r.code == 0 && decodeTask(t, r.stdout).State == "completed"
	})
	require.NoError(t, second.Process.Signal(syscall.SIGTERM))
	require.NoError(t, <-secondExit, "the second worker exits cleanly:\n%s", secondErr.String())

	lines := ledgerLines(t, ledger)
	require.Len(t, lines, 2, "one run of the step, started and ended: %q", lines)
	require.True(t, strings.HasPrefix(lines[0], "start ") && strings.HasPrefix(lines[1], "end "), "%q", lines)
	r := weftCLI(t, "task", "1", "--json", "--db", db)
	task := decodeTask(t, r.stdout)
	step := stepByName(t, task, "s")
	require.Equal(t, 1, step.Attempts, "the step ran once")
	require.NotContains(t, step.Error, "lease lapsed")
}

// ledgerLines returns the lines of a ledger file (none if it is missing).
func ledgerLines(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	require.NoError(t, err)
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines
}
