package builtin

import (
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestGuard: the watchdog kills the groups still registered when its pipe
// closes (as when the engine dies), leaves alone those removed, and is
// started again with every group if it dies.
func TestGuard(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// act runs between registering both groups and closing the guard;
		// removed is the group it unregistered, if any.
		act func(t *testing.T, g *Guard, a, b int) (removed int)
	}{
		{name: "kills what is registered", act: func(*testing.T, *Guard, int, int) int { return 0 }},
		{name: "spares what was removed", act: func(_ *testing.T, g *Guard, a, _ int) int {
			g.remove(a)
			return a
		}},
		{name: "survives its watchdog's death", act: func(t *testing.T, g *Guard, _, _ int) int {
			g.mu.Lock()
			wd, exited := g.wd, g.exited
			g.mu.Unlock()
			require.NoError(t, wd.Process.Kill())
			<-exited
			// The next registration finds the pipe broken and starts
			// another watchdog with every group.
			c := startGroup(t)
			require.NoError(t, g.add(c.pgid))
			return 0
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g := NewGuard()
			a, b := startGroup(t), startGroup(t)
			require.NoError(t, g.add(a.pgid))
			require.NoError(t, g.add(b.pgid))
			removed := tt.act(t, g, a.pgid, b.pgid)
			g.Close()
			// Close returns once the watchdog sent its kills. A group it
			// spared is still running: ended now with SIGTERM, its shell
			// reports SIGTERM, where one the watchdog killed reports
			// SIGKILL (however soon it was reaped).
			for _, grp := range []group{a, b} {
				if grp.pgid == removed {
					require.NoError(t, syscall.Kill(-grp.pgid, syscall.SIGTERM))
					require.Equal(t, syscall.SIGTERM, grp.signal(t), "group %d was unregistered but killed", grp.pgid)
					continue
				}
				require.Equal(t, syscall.SIGKILL, grp.signal(t), "group %d outlived the guard", grp.pgid)
			}
		})
	}
}

// group is a shell with a background sleep in a process group of its own.
type group struct {
	pgid int
	done chan struct{}
	cmd  *exec.Cmd
}

// signal waits for the group's shell to end and returns the signal that
// ended it.
func (g group) signal(t *testing.T) syscall.Signal {
	t.Helper()
	select {
	case <-g.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("group %d still runs", g.pgid)
	}
	ws, ok := g.cmd.ProcessState.Sys().(syscall.WaitStatus)
	require.True(t, ok)
	require.True(t, ws.Signaled(), "group %d's shell exited with %v", g.pgid, g.cmd.ProcessState)
	return ws.Signal()
}

// startGroup starts a group, killed at the end of the test.
func startGroup(t *testing.T) group {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", "sleep 60 & wait")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, cmd.Start())
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	})
	return group{pgid: cmd.Process.Pid, done: done, cmd: cmd}
}
