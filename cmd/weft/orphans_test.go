package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestExecDiesWithWorker SIGKILLs a real `weft worker` while an exec step
// runs and checks that what the step started dies with it: the command
// itself, and a process the command started in the background.
func TestExecDiesWithWorker(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the weft binary")
	}
	t.Parallel()
	bin, err := buildWeft()
	require.NoError(t, err)
	for _, tc := range []struct {
		name   string
		script string // writes the pid to watch to $PIDFILE
	}{
		{name: "command", script: `echo $$ > "$PIDFILE.tmp" && mv "$PIDFILE.tmp" "$PIDFILE"; exec sleep 60`},
		{name: "grandchild", script: `sleep 60 & echo $! > "$PIDFILE.tmp" && mv "$PIDFILE.tmp" "$PIDFILE"; wait`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			db := filepath.Join(dir, "weft.db")
			pidFile := filepath.Join(dir, "pid")
			tpl := writeFile(t, dir, "orphan.yaml", fmt.Sprintf(`namespace: orphan
name: %s
version: "1"
steps:
  - name: s
    handler: exec
    config:
      env: {PIDFILE: %q}
      command: ["/bin/sh", "-c", %q]
`, tc.name, pidFile, tc.script))
			out, err := exec.Command(bin, "submit", tpl, "--db", db).CombinedOutput()
			require.NoError(t, err, "%s", out)

			w := exec.Command(bin, "worker", "--db", db)
			var stderr bytes.Buffer
			w.Stderr = &stderr
			require.NoError(t, w.Start())
			pid := waitPIDFile(t, pidFile, func() string { return "the step never started" })
			t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
			require.False(t, processGone(pid), "the step's process %d runs", pid)

			require.NoError(t, w.Process.Signal(syscall.SIGKILL))
			_ = w.Wait()
			poll(t, 10*time.Second, func() string {
				return fmt.Sprintf("process %d outlived the SIGKILLed worker:\n%s", pid, stderr.String())
			}, func() bool { return processGone(pid) })
		})
	}
}

// waitPIDFile waits for a step to write its pid to path (whole: written
// to a temporary file, then moved) and returns it; why says what went
// wrong when it never comes.
func waitPIDFile(t *testing.T, path string, why func() string) int {
	t.Helper()
	var pid int
	poll(t, 30*time.Second, why, func() bool {
		b, err := os.ReadFile(path)
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	})
	return pid
}

// processGone reports whether a process has ended: it does not exist, or
// it is a zombie that its new parent has not reaped yet.
func processGone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return syscall.Kill(pid, 0) != nil
	}
	// pid (comm) state ...: the state follows the last ')'.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] == 'Z' || s[i+2] == 'X'
	}
	return false
}
