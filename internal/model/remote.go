package model

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/weftrun/weft/wire"
)

// remoteWorker speaks the remote-worker protocol (package wire) to `weft
// serve` as a worker in any language would: it claims remote.work steps,
// records each run's start and end in the ledger (runner "rN", engine
// "remote"), and completes them. Abandon makes it drop what it holds and
// go silent past its lease, as a worker that lost its network would: the
// server must take the steps back and run them again.
type remoteWorker struct {
	base, token, ledger string
	client              *http.Client

	mu      sync.Mutex
	active  map[string]bool // runners in progress
	n       int
	abandon bool

	id       string
	lease    time.Duration
	interval time.Duration
	lastBeat time.Time
}

func (w *remoteWorker) isActive(runner string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.active[runner]
}

// Abandon asks the worker to drop the steps it holds (without completing
// them) and send nothing for its lease and a second more.
func (w *remoteWorker) Abandon() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.abandon = true
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

func (w *remoteWorker) record(line string) {
	f, err := os.OpenFile(w.ledger, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	_, _ = f.WriteString(line + "\n")
	_ = f.Close()
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func (w *remoteWorker) run(ctx context.Context) {
	for ctx.Err() == nil {
		w.mu.Lock()
		abandon := w.abandon
		w.abandon = false
		w.mu.Unlock()
		if abandon && w.id != "" {
			// Silent past the lease: no heartbeat, no claim, no deregistration.
			sleepCtx(ctx, w.lease+time.Second)
			w.id = ""
			continue
		}
		if w.id == "" {
			var reg wire.WorkerRegistered
			if _, err := w.call(ctx, "POST", "/v1/workers", wire.RegisterWorker{Name: "model", Handlers: []string{"remote.work"}}, &reg); err != nil {
				sleepCtx(ctx, 100*time.Millisecond)
				continue
			}
			w.id = reg.WorkerID
			w.interval = time.Duration(reg.HeartbeatIntervalMS) * time.Millisecond
			w.lease = time.Duration(reg.LeaseTTLMS) * time.Millisecond
			w.lastBeat = time.Now()
		}
		if time.Since(w.lastBeat) > w.interval/2 {
			// It holds nothing between claims: it ends each step before
			// claiming again.
			st, err := w.call(ctx, "POST", "/v1/workers/"+w.id+"/heartbeat", wire.Heartbeat{Steps: []wire.Fence{}}, nil)
			if st == http.StatusNotFound || st == http.StatusGone {
				w.id = ""
				continue
			}
			if err != nil {
				sleepCtx(ctx, 100*time.Millisecond)
				continue
			}
			w.lastBeat = time.Now()
		}
		var cr wire.ClaimResponse
		wait := min(300*time.Millisecond, w.interval/2)
		st, err := w.call(ctx, "POST", "/v1/workers/"+w.id+"/claim", wire.ClaimRequest{Handlers: []string{"remote.work"}, Max: 2, WaitMS: wait.Milliseconds()}, &cr)
		if st == http.StatusNotFound || st == http.StatusGone {
			w.id = ""
			continue
		}
		if err != nil {
			sleepCtx(ctx, 100*time.Millisecond)
			continue
		}
		for _, s := range cr.Steps {
			w.mu.Lock()
			w.n++
			runner := fmt.Sprintf("r%d", w.n)
			w.active[runner] = true
			w.mu.Unlock()
			name := strings.ReplaceAll(s.Step, " ", "_")
			w.record(fmt.Sprintf("start %d %s %d %s remote", s.TaskID, name, s.Attempt, runner))
			sleepCtx(ctx, 80*time.Millisecond) // the work
			w.record(fmt.Sprintf("end %d %s %d %s remote", s.TaskID, name, s.Attempt, runner))
			w.mu.Lock()
			delete(w.active, runner)
			abandon := w.abandon
			w.mu.Unlock()
			if abandon {
				continue // dropped: the server takes it back when the lease lapses
			}
			result := json.RawMessage(fmt.Sprintf(`{"task": %d, "by": "remote"}`, s.TaskID))
			deadline := time.Now().Add(time.Minute)
			for ctx.Err() == nil && time.Now().Before(deadline) {
				fence := s.Fence
				st, err := w.call(ctx, "POST", "/v1/workers/"+w.id+"/complete", wire.Complete{Fence: &fence, Result: result}, nil)
				if err == nil || (st >= 400 && st < 500) {
					break // recorded, or the step was taken from us (409)
				}
				sleepCtx(ctx, 100*time.Millisecond)
			}
		}
	}
}
