//go:build !linux

package builtin

import "syscall"

// dieWithParent does nothing where there is no parent-death signal: the
// guard's watchdog alone kills the commands of an engine that died.
func dieWithParent(*syscall.SysProcAttr) {}

// holdThread does nothing: without a parent-death signal the forking
// thread does not matter.
func holdThread() (release func()) { return func() {} }
