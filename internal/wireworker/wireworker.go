// Package wireworker is the remote worker of weft's test harnesses
// (internal/chaos, internal/model): it speaks the remote-worker protocol
// (package wire) to `weft serve` as a worker in any language would. It
// registers, heartbeats while it holds nothing, claims steps of one
// handler, hands each to the harness's Work (which records it and works),
// and completes it, retrying the completion through server restarts.
package wireworker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/weftrun/weft/wire"
)

// Worker is one remote worker. Set the exported fields before Run.
type Worker struct {
	Base    string // http://addr of weft serve
	Token   string // an API key with workers:connect
	Name    string // the name it registers with
	Handler string // the one handler it serves
	Client  *http.Client
	// Work runs a claimed step and returns its result.
	Work func(ctx context.Context, s wire.ClaimedStep) json.RawMessage
	// Function, if set, runs the function step of a durable function
	// (kind "function"): it returns the new calls the function made, or
	// its result, or an error that fails the step for good. A durable
	// function's step calls (kind "call") go to Work.
	Function func(ctx context.Context, s wire.ClaimedStep) ([]wire.Call, json.RawMessage, error)

	mu      sync.Mutex
	abandon bool
	lease   time.Duration
	retries int

	// Run's own.
	id       string
	interval time.Duration
	lastBeat time.Time
}

// Abandon asks the worker to drop the steps it holds (without completing
// them) and send nothing for its lease and a second more, as a worker
// that lost its network would: the server must take the steps back.
func (w *Worker) Abandon() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.abandon = true
}

// Lease is the lease the server gave it when it last registered (0
// before).
func (w *Worker) Lease() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lease
}

// Retries counts the completions it sent again because the server did
// not answer (it was restarting).
func (w *Worker) Retries() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.retries
}

func (w *Worker) abandoned() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.abandon
}

func (w *Worker) takeAbandon() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	a := w.abandon
	w.abandon = false
	return a
}

func (w *Worker) call(ctx context.Context, method, path string, body, out any) (int, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequestWithContext(ctx, method, w.Base+path, bytes.NewReader(b))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+w.Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := w.Client.Do(req)
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

// unknown reports an answer that says the server no longer knows the
// worker: it registers again.
func unknown(status int) bool { return status == http.StatusNotFound || status == http.StatusGone }

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// Run works until ctx ends.
func (w *Worker) Run(ctx context.Context) {
	const pause = 100 * time.Millisecond
	for ctx.Err() == nil {
		if w.takeAbandon() && w.id != "" {
			// Silent past the lease: no heartbeat, no claim, no deregistration.
			sleep(ctx, w.Lease()+time.Second)
			w.id = ""
			continue
		}
		if w.id == "" {
			var reg wire.WorkerRegistered
			if _, err := w.call(ctx, "POST", "/v1/workers", wire.RegisterWorker{Name: w.Name, Handlers: []string{w.Handler}}, &reg); err != nil {
				sleep(ctx, pause)
				continue
			}
			w.mu.Lock()
			w.lease = time.Duration(reg.LeaseTTLMS) * time.Millisecond
			w.mu.Unlock()
			w.id = reg.WorkerID
			w.interval = time.Duration(reg.HeartbeatIntervalMS) * time.Millisecond
			w.lastBeat = time.Now()
		}
		if time.Since(w.lastBeat) > w.interval/2 {
			// It holds nothing between claims: it ends each step before
			// claiming again.
			st, err := w.call(ctx, "POST", "/v1/workers/"+w.id+"/heartbeat", wire.Heartbeat{Steps: []wire.Fence{}}, nil)
			if unknown(st) {
				w.id = ""
				continue
			}
			if err != nil {
				sleep(ctx, pause)
				continue
			}
			w.lastBeat = time.Now()
		}
		var cr wire.ClaimResponse
		wait := min(300*time.Millisecond, w.interval/2)
		st, err := w.call(ctx, "POST", "/v1/workers/"+w.id+"/claim", wire.ClaimRequest{Handlers: []string{w.Handler}, Max: 2, WaitMS: wait.Milliseconds()}, &cr)
		if unknown(st) {
			w.id = ""
			continue
		}
		if err != nil {
			sleep(ctx, pause)
			continue
		}
		for _, s := range cr.Steps {
			if s.Kind == "function" && w.Function != nil {
				calls, result, err := w.Function(ctx, s)
				switch {
				case w.abandoned():
				case err != nil:
					w.report(ctx, "fail", wire.Fail{Fence: &s.Fence, Error: err.Error(), Permanent: true})
				case len(calls) > 0:
					w.report(ctx, "calls", wire.Calls{Fence: &s.Fence, Calls: calls})
				default:
					w.complete(ctx, s.Fence, result)
				}
				continue
			}
			result := w.Work(ctx, s)
			if w.abandoned() {
				continue // dropped: the server takes it back when the lease lapses
			}
			w.complete(ctx, s.Fence, result)
		}
	}
}

// complete reports a step's result, for up to a minute while the server
// does not answer. A result the server refuses is reported as the
// attempt's permanent failure rather than left to be reclaimed.
func (w *Worker) complete(ctx context.Context, fence wire.Fence, result json.RawMessage) {
	deadline := time.Now().Add(time.Minute)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		st, err := w.call(ctx, "POST", "/v1/workers/"+w.id+"/complete", wire.Complete{Fence: &fence, Result: result}, nil)
		if st >= 400 && st < 500 && st != http.StatusConflict && !unknown(st) {
			st, err = w.call(ctx, "POST", "/v1/workers/"+w.id+"/fail",
				wire.Fail{Fence: &fence, Error: fmt.Sprintf("the server refused the result: %d %v", st, err), Permanent: true}, nil)
		}
		if err == nil || (st >= 400 && st < 500) {
			return // recorded, or the step was taken from us (409): it runs again elsewhere
		}
		if ctx.Err() != nil {
			return // stopped: a call cut short is not a retry
		}
		w.mu.Lock()
		w.retries++
		w.mu.Unlock()
		sleep(ctx, 100*time.Millisecond)
	}
}

// report sends a report (fail, calls) for up to a minute while the server
// does not answer; a refusal (4xx) ends it: the step runs again, or fails
// under its lease.
func (w *Worker) report(ctx context.Context, kind string, body any) {
	deadline := time.Now().Add(time.Minute)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		st, err := w.call(ctx, "POST", "/v1/workers/"+w.id+"/"+kind, body, nil)
		if err == nil || (st >= 400 && st < 500) || ctx.Err() != nil {
			return
		}
		w.mu.Lock()
		w.retries++
		w.mu.Unlock()
		sleep(ctx, 100*time.Millisecond)
	}
}
