package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
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

// remoteWorker speaks the remote-worker protocol (package wire) to the
// server, as a worker in any language would: it claims remote.work steps,
// appends "TASK STEP ATTEMPT remote" to the ledger, and completes them,
// retrying through the server's restarts.
type remoteWorker struct {
	base, token, ledger string
	client              *http.Client
	id                  string
	interval            time.Duration
	lastBeat            time.Time
	mu                  sync.Mutex
	errs                int
}

func (w *remoteWorker) call(ctx context.Context, method, path string, body, out any) (int, error) {
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, method, w.base+path, bytes.NewReader(b))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+w.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := w.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, err
	}
	if resp.StatusCode >= 300 {
		return resp.StatusCode, fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, strings.TrimSpace(string(data)))
	}
	if out != nil && len(data) > 0 {
		return resp.StatusCode, json.Unmarshal(data, out)
	}
	return resp.StatusCode, nil
}

func (w *remoteWorker) run(ctx context.Context) {
	pause := func() {
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	for ctx.Err() == nil {
		if w.id == "" {
			var reg wire.WorkerRegistered
			if _, err := w.call(ctx, "POST", "/v1/workers", wire.RegisterWorker{Name: "chaos", Handlers: []string{"remote.work"}}, &reg); err != nil {
				pause()
				continue
			}
			w.id, w.interval = reg.WorkerID, time.Duration(reg.HeartbeatIntervalMS)*time.Millisecond
		}
		if time.Since(w.lastBeat) > w.interval/2 {
			// It holds nothing between claims: it completes each step
			// before claiming again.
			st, err := w.call(ctx, "POST", "/v1/workers/"+w.id+"/heartbeat", wire.Heartbeat{Steps: []wire.Fence{}}, nil)
			if st == http.StatusNotFound || st == http.StatusGone {
				w.id = ""
				continue
			}
			if err != nil {
				pause()
				continue
			}
			w.lastBeat = time.Now()
		}
		var cr wire.ClaimResponse
		st, err := w.call(ctx, "POST", "/v1/workers/"+w.id+"/claim", wire.ClaimRequest{Handlers: []string{"remote.work"}, Max: 2, WaitMS: 300}, &cr)
		if st == http.StatusNotFound || st == http.StatusGone {
			w.id = ""
			continue
		}
		if err != nil {
			pause()
			continue
		}
		for _, s := range cr.Steps {
			f, err := os.OpenFile(w.ledger, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
			if err == nil {
				_, _ = fmt.Fprintf(f, "%d %s %d remote\n", s.TaskID, s.Step, s.Attempt)
				f.Close()
			}
			time.Sleep(100 * time.Millisecond) // the work
			result := json.RawMessage(fmt.Sprintf(`{"step": %q, "task": %d, "by": "remote"}`, s.Step, s.TaskID))
			deadline := time.Now().Add(time.Minute)
			for ctx.Err() == nil && time.Now().Before(deadline) {
				fence := s.Fence
				st, err := w.call(ctx, "POST", "/v1/workers/"+w.id+"/complete", wire.Complete{Fence: &fence, Result: result}, nil)
				if st >= 400 && st < 500 && st != http.StatusConflict && st != http.StatusNotFound && st != http.StatusGone {
					// The result itself was refused: report the attempt
					// failed rather than leave the step to be reclaimed.
					st, err = w.call(ctx, "POST", "/v1/workers/"+w.id+"/fail",
						wire.Fail{Fence: &fence, Error: fmt.Sprintf("the server refused the result: %d %v", st, err), Permanent: true}, nil)
				}
				if err == nil || (st >= 400 && st < 500) {
					break // recorded, or the step was taken from us (409): it runs again elsewhere
				}
				w.mu.Lock()
				w.errs++
				w.mu.Unlock()
				pause()
			}
		}
	}
}
