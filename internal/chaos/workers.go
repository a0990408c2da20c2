package chaos

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"syscall"
	"time"
)

// proc is one `weft worker` process of the run, with its stderr kept for
// the report.
type proc struct {
	cmd    *exec.Cmd
	stderr *bytes.Buffer
}

func (r *runner) startWorker() error {
	w := &proc{cmd: exec.Command(r.bin, "worker", "--db", r.url, "--concurrency", "6"), stderr: &bytes.Buffer{}}
	w.cmd.Stderr = w.stderr
	w.cmd.SysProcAttr = orphanGuard()
	if err := w.cmd.Start(); err != nil {
		return err
	}
	r.workers = append(r.workers, w)
	return nil
}

func (r *runner) live() []*proc {
	var out []*proc
	for _, w := range r.workers {
		if w.cmd.ProcessState == nil {
			out = append(out, w)
		}
	}
	return out
}

func (r *runner) stopWorkers() {
	for _, w := range r.live() {
		_ = w.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, w := range r.live() {
		done := make(chan struct{})
		go func() { _ = w.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = w.cmd.Process.Kill()
			<-done
		}
	}
}

func (r *runner) waitLive(ctx context.Context, n int) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		var live int
		err := r.db.QueryRowContext(ctx, `SELECT count(*) FROM engines WHERE state = 'live'`).Scan(&live)
		if err == nil && live >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d workers registered (%v)", live, n, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// orphanGuard makes a child process die with this program, should it be
// killed before it stops its workers and server.
func orphanGuard() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
