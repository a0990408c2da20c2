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
			require.NoError(t, g.add(c))
			return 0
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g := NewGuard()
			a, b := startGroup(t), startGroup(t)
			require.NoError(t, g.add(a))
			require.NoError(t, g.add(b))
			removed := tt.act(t, g, a, b)
			g.Close()
			for _, pg := range []int{a, b} {
				if pg == removed {
					require.NoError(t, syscall.Kill(-pg, 0), "group %d was unregistered but killed", pg)
					continue
				}
				require.Eventually(t, func() bool { return syscall.Kill(-pg, 0) != nil }, 10*time.Second, 10*time.Millisecond,
					"group %d outlived the guard", pg)
			}
		})
	}
}

// startGroup starts a shell with a background sleep in a process group of
// its own, reaped by the test, and returns the group.
func startGroup(t *testing.T) int {
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
	return cmd.Process.Pid
}
