// Package weftproc runs the weft processes of weft's test harnesses
// (internal/chaos, internal/model): it builds the CLI, starts `weft
// worker` and `weft serve` processes that die with the harness, keeps the
// tail of their stderr for reports, and waits for a server to answer.
package weftproc

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Build builds cmd/weft from the repository at root into dir and returns
// the binary's path.
func Build(ctx context.Context, root, dir string) (string, error) {
	bin := filepath.Join(dir, "weft")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/weft")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
}

// CreateKey creates an API key with `weft keys create` on database db and
// returns its token.
func CreateKey(ctx context.Context, bin, db, name, permissions string) (string, error) {
	out, err := exec.CommandContext(ctx, bin, "keys", "create", "--db", db, "--name", name, "--permissions", permissions).Output()
	if err != nil {
		return "", fmt.Errorf("weft keys create: %w", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return strings.TrimSpace(lines[len(lines)-1]), nil
}

// Proc is one weft process. Set Name, Args and Env, then Start it; a
// process that exited may be started again.
type Proc struct {
	Name string
	Args []string // after the binary: "worker", "--db", …
	Env  []string // nil: this process's environment

	cmd    *exec.Cmd
	stderr *tailWriter
	done   chan struct{} // closed once the process exited and was reaped
	err    error         // what Wait returned, once done is closed
}

// Start starts the process with binary bin. It is killed should the
// harness die before it stops it.
func (p *Proc) Start(bin string) error {
	p.stderr = &tailWriter{}
	p.cmd = exec.Command(bin, p.Args...)
	p.cmd.Env = p.Env
	p.cmd.Stderr = p.stderr
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", p.Name, err)
	}
	p.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { p.err = cmd.Wait(); close(done) }(p.cmd, p.done)
	return nil
}

// Done is closed once the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Wait waits for the process to exit and returns how it did (nil: status 0).
func (p *Proc) Wait() error {
	<-p.done
	return p.err
}

// ExitState describes how the process exited ("exit status 1", "signal:
// killed").
func (p *Proc) ExitState() string {
	<-p.done
	return p.cmd.ProcessState.String()
}

// PID is the process's id.
func (p *Proc) PID() int { return p.cmd.Process.Pid }

// Signal sends sig to the process.
func (p *Proc) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// Kill kills the process (SIGKILL) and waits for it to exit.
func (p *Proc) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Stop sends SIGTERM and waits up to d for the process to exit, then kills
// it. A process not started or already exited is left alone.
func (p *Proc) Stop(d time.Duration) {
	if p.cmd == nil || p.Exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(d):
		p.Kill()
	}
}

// Tail returns the last n lines the process wrote to stderr.
func (p *Proc) Tail(n int) string {
	if p.stderr == nil {
		return ""
	}
	return Tail(p.stderr.String(), n)
}

// tailWriter keeps the last half MiB or more of what is written to it.
type tailWriter struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *tailWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.b.Len() > 1<<20 { // keep the tail only
		w.b.Next(w.b.Len() - 1<<19)
	}
	return w.b.Write(p)
}

func (w *tailWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// Tail returns the last n lines of s.
func Tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// WaitHealthy waits (up to 30 s) until the `weft serve` process p answers
// 200 on base/health/live.
func WaitHealthy(ctx context.Context, base string, p *Proc) error {
	client := &http.Client{Timeout: 5 * time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := client.Get(base + "/health/live")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil || p.Exited() {
			return fmt.Errorf("weft serve did not come up on %s:\n%s", base, p.Tail(20))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// FreeAddr returns a loopback address with a free port.
func FreeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// WithParam adds a query parameter to a database URL.
func WithParam(u, key, value string) string {
	sep := "?"
	if strings.Contains(u, "?") {
		sep = "&"
	}
	return u + sep + key + "=" + url.QueryEscape(value)
}
