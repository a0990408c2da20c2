package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestResumesAfterKill: the program killed with SIGKILL during its durable
// sleep, and started again, completes the task without running a step
// that finished before the kill.
func TestResumesAfterKill(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bin := filepath.Join(dir, "durable")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "build:\n%s", out)
	db := filepath.Join(dir, "checkout.db")

	first := exec.Command(bin, "--db", db, "--sleep", "3s")
	stdout, err := first.StdoutPipe()
	require.NoError(t, err)
	first.Stderr = os.Stderr
	require.NoError(t, first.Start())
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var before []string
	deadline := time.After(time.Minute)
wait:
	for {
		select {
		case line, ok := <-lines:
			require.True(t, ok, "the program ended before it slept: %q", before)
			before = append(before, line)
			if strings.HasPrefix(line, "sleeping") {
				break wait
			}
		case <-deadline:
			t.Fatalf("no \"sleeping\" within a minute: %q", before)
		}
	}
	require.NoError(t, first.Process.Kill())
	_ = first.Wait()
	require.Contains(t, before, "ran step reserve")

	again, err := exec.Command(bin, "--db", db, "--sleep", "3s").CombinedOutput()
	require.NoError(t, err, "second run:\n%s", again)
	after := string(again)
	require.Contains(t, after, "resuming task 1")
	require.Contains(t, after, "ran step ship")
	require.Contains(t, after, "task 1 completed")
	for _, line := range before {
		if strings.HasPrefix(line, "ran step") {
			require.NotContains(t, after, line, "a step that finished before the kill ran again")
		}
	}
}

func TestRefusesNoSleep(t *testing.T) {
	t.Parallel()
	err := run(t.Context(), filepath.Join(t.TempDir(), "x.db"), 0)
	require.ErrorContains(t, err, "--sleep must be above zero")
}
