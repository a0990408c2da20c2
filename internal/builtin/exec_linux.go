//go:build linux

package builtin

import (
	"runtime"
	"syscall"
)

// dieWithParent has the kernel SIGKILL the command when the thread that
// started it exits: with the engine, however it ends.
func dieWithParent(attr *syscall.SysProcAttr) { attr.Pdeathsig = syscall.SIGKILL }

// holdThread keeps the calling goroutine on its OS thread until the
// returned function is called. The parent-death signal fires when the
// thread that forked the child exits, not the process (golang/go#27505),
// and the runtime may end a thread that a goroutine locked and left: Exec
// holds the forking thread from before the start until the command exited.
func holdThread() (release func()) {
	runtime.LockOSThread()
	return runtime.UnlockOSThread
}
