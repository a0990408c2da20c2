package builtin

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
)

// Guard makes the commands of exec steps die with the process that started
// them. Each command runs in a process group of its own, which Exec kills
// when the step is cancelled or times out; the direct child also gets
// SIGKILL from the kernel when the engine dies (Linux, parent-death
// signal). What the command started itself (a shell's background job) gets
// no such signal: a small watchdog, one per guard, kills the registered
// groups once the engine that holds its pipe is gone, however it ended
// (even SIGKILL). The watchdog is /bin/sh reading that pipe; where there is
// no /bin/sh only the parent-death signal holds.
//
// The zero Guard is not usable; a nil *Guard guards nothing.
type Guard struct {
	mu     sync.Mutex
	w      *os.File // the watchdog's stdin, held only by this process
	wd     *exec.Cmd
	exited chan struct{} // closed when the watchdog exited
	groups map[int]struct{}
	closed bool
	// failed is the error with which the watchdog last failed to start;
	// the guard does not try again.
	failed error
}

// watchdogScript keeps the set of process groups written as "+PGID" and
// "-PGID" lines and, at the end of its input (the engine closed the pipe
// or died), kills those still in the set. It ignores the signals an
// operator sends to the engine's process group.
const watchdogScript = `trap '' INT TERM HUP
g=' '
while IFS= read -r l; do
  case $l in
    +*) g="$g${l#+} " ;;
    -*) p=${l#-}
        case $g in *" $p "*) g="${g%% $p *} ${g#* $p }" ;; esac ;;
  esac
done
for p in $g; do kill -s KILL -- "-$p" 2>/dev/null; done
`

// NewGuard returns a guard; its watchdog starts with the first command.
func NewGuard() *Guard {
	return &Guard{groups: map[int]struct{}{}}
}

// add registers the process group of a command that just started. An
// error means that only the parent-death signal guards it.
func (g *Guard) add(pgid int) error {
	if g == nil {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return errors.New("guard closed")
	}
	g.groups[pgid] = struct{}{}
	if g.w == nil {
		// A new watchdog is given every group, this one included: sent
		// twice, a group would stay registered after one removal.
		return g.startLocked()
	}
	if err := g.sendLocked("+" + strconv.Itoa(pgid)); err != nil {
		// The watchdog died: start another with every group.
		g.stopLocked()
		return g.startLocked()
	}
	return nil
}

// remove unregisters a process group whose command has exited.
func (g *Guard) remove(pgid int) {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.groups[pgid]; !ok {
		return
	}
	delete(g.groups, pgid)
	if g.w != nil {
		if err := g.sendLocked("-" + strconv.Itoa(pgid)); err != nil {
			g.stopLocked()
		}
	}
}

// startLocked starts the watchdog if none runs and gives it every group.
func (g *Guard) startLocked() error {
	if g.w != nil {
		return nil
	}
	if g.failed != nil {
		return g.failed
	}
	r, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("exec guard: %w", err)
	}
	wd := exec.Command("/bin/sh", "-c", watchdogScript)
	wd.Stdin = r
	// A group of its own: signals for the engine's group do not reach it.
	wd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := wd.Start(); err != nil {
		r.Close()
		w.Close()
		g.failed = fmt.Errorf("exec guard: start the watchdog: %w", err)
		return g.failed
	}
	r.Close()
	exited := make(chan struct{})
	go func() {
		_ = wd.Wait()
		close(exited)
	}()
	g.w, g.wd, g.exited = w, wd, exited
	for pgid := range g.groups {
		if err := g.sendLocked("+" + strconv.Itoa(pgid)); err != nil {
			g.stopLocked()
			return fmt.Errorf("exec guard: %w", err)
		}
	}
	return nil
}

func (g *Guard) sendLocked(line string) error {
	_, err := g.w.WriteString(line + "\n")
	return err
}

// stopLocked ends the watchdog: closing its input makes it kill the
// groups still registered and exit.
func (g *Guard) stopLocked() {
	if g.w == nil {
		return
	}
	g.w.Close()
	<-g.exited
	g.w, g.wd, g.exited = nil, nil, nil
}

// Close ends the watchdog, killing the groups of commands still running.
// The engine calls it once its handlers have returned.
func (g *Guard) Close() {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	g.stopLocked()
}
