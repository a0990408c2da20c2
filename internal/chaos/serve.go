package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/weftrun/weft/wire"
)

// FaultKillServe SIGKILLs `weft serve` while a remote worker is attached
// to it, and starts it again on the same address.
const FaultKillServe = "kill-serve"

// remoteTemplate is the share of the workload run by a remote worker
// through `weft serve`: r is claimed over the wire protocol, z is an exec
// step after it.
const remoteTemplate = `namespace: chaos
name: remote
version: "1"
steps:
  - name: r
    handler: remote.work
    retry: {max_attempts: 20, backoff: fixed, initial: 20ms}
  - name: z
    handler: exec
    depends_on: [r]
    retry: {max_attempts: 20, backoff: fixed, initial: 20ms}
    config: {command: ["/bin/sh", %[1]q, %[2]q]}
`

// server is a `weft serve` process on a fixed loopback address.
type server struct {
	bin, db, addr string
	cmd           *exec.Cmd
	stderr        *bytes.Buffer
}

func (s *server) start() error {
	s.stderr = &bytes.Buffer{}
	s.cmd = exec.Command(s.bin, "serve", "--db", s.db, "--addr", s.addr, "--concurrency", "4")
	s.cmd.Stderr = s.stderr
	s.cmd.SysProcAttr = orphanGuard()
	if err := s.cmd.Start(); err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + s.addr + "/health/live")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("weft serve did not come up on %s:\n%s", s.addr, tail(s.stderr.String(), 20))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *server) kill() {
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	_ = s.cmd.Wait()
}

func (s *server) stop() {
	if s.cmd == nil || s.cmd.ProcessState != nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
	}
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// remoteWork is the remote worker's work: it appends "TASK STEP ATTEMPT
// remote" to the ledger and works 0.1 s.
func remoteWork(ledger string) func(context.Context, wire.ClaimedStep) json.RawMessage {
	return func(ctx context.Context, s wire.ClaimedStep) json.RawMessage {
		_ = appendLine(ledger, fmt.Sprintf("%d %s %d remote", s.TaskID, s.Step, s.Attempt))
		select { // the work
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
		return json.RawMessage(fmt.Sprintf(`{"step": %q, "task": %d, "by": "remote"}`, s.Step, s.TaskID))
	}
}

// appendLine appends a line to the ledger.
func appendLine(ledger, line string) error {
	f, err := os.OpenFile(ledger, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintln(f, line); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
