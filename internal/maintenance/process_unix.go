//go:build unix

package maintenance

import (
	"errors"
	"syscall"
)

// processAlive reports whether a process with this id exists on this host.
func processAlive(pid int) bool {
	if pid <= 0 {
		return true // unknown: rely on the heartbeat
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
