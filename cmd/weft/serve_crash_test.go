package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/store/sqlite"
	"github.com/weftrun/weft/wire"
)

// wireWorker speaks the remote-worker protocol over HTTP, as any worker in
// any language would.
type wireWorker struct {
	t     *testing.T
	base  string
	token string
	id    string
}

func (w *wireWorker) call(method, path string, body, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		require.NoError(w.t, err)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, w.base+path, rd)
	require.NoError(w.t, err)
	req.Header.Set("Authorization", "Bearer "+w.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, err
	}
	if resp.StatusCode >= 300 {
		return resp.StatusCode, fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, data)
	}
	if out != nil && len(data) > 0 {
		require.NoError(w.t, json.Unmarshal(data, out))
	}
	return resp.StatusCode, nil
}

func (w *wireWorker) register() wire.WorkerRegistered {
	var reg wire.WorkerRegistered
	_, err := w.call("POST", "/v1/workers", wire.RegisterWorker{Name: "crash", Handlers: []string{"remote.work"}}, &reg)
	require.NoError(w.t, err)
	w.id = reg.WorkerID
	return reg
}

func (w *wireWorker) claim() ([]wire.ClaimedStep, error) {
	var out wire.ClaimResponse
	_, err := w.call("POST", "/v1/workers/"+w.id+"/claim", wire.ClaimRequest{Handlers: []string{"remote.work"}, Max: 1}, &out)
	return out.Steps, err
}

func (w *wireWorker) heartbeat(held ...wire.Fence) []wire.Fence {
	var out wire.HeartbeatResponse
	_, err := w.call("POST", "/v1/workers/"+w.id+"/heartbeat", wire.Heartbeat{Steps: append([]wire.Fence{}, held...)}, &out)
	require.NoError(w.t, err)
	return out.Lost
}

// killOnReply is a TCP proxy in front of a server: it forwards one
// connection's request and, the moment the server starts to answer (the
// claim is saved by then), kills the server with SIGKILL and drops the
// answer, so the claim is saved but never reaches the worker.
func killOnReply(t *testing.T, target string, kill func()) (addr string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		client, err := ln.Accept()
		if err != nil {
			return
		}
		defer client.Close()
		server, err := net.Dial("tcp", strings.TrimPrefix(target, "http://"))
		if err != nil {
			return
		}
		defer server.Close()
		go func() { _, _ = io.Copy(server, client) }()
		var first [1]byte
		if _, err := server.Read(first[:]); err == nil {
			kill()
		}
	}()
	return "http://" + ln.Addr().String()
}

// TestServeKilledAfterClaim kills `weft serve` between saving a remote
// worker's claim and the worker receiving it. The worker keeps
// heartbeating, to a restarted server, without the step it never got: the
// step is released within a lease period and the worker runs it, once.
func TestServeKilledAfterClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	db := filepath.Join(dir, "weft.db")
	tpl := writeFile(t, dir, "remote.yaml", "namespace: crash\nname: remote\nversion: \"1\"\nsteps:\n  - name: work\n    handler: remote.work\n")
	token := createKey(t, db, "worker", "workers:connect")
	r := weftCLI(t, "--db", db, "submit", tpl)
	requireCode(t, 0, r)

	first := startServeProcess(t, db)
	w := &wireWorker{t: t, base: first.url, token: token}
	reg := w.register()
	w.base = killOnReply(t, first.url, func() { _ = first.cmd.Process.Signal(syscall.SIGKILL) })
	_, err := w.claim()
	require.Error(t, err, "the server died before it answered the claim")
	_ = first.stop()

	s, err := sqlite.Open(ctx, db, sqlite.Options{})
	require.NoError(t, err)
	defer s.Close()
	tasks, err := s.ListTasks(ctx, store.TaskFilter{})
	require.NoError(t, err)
	require.Len(t, tasks, 1)
	task, err := s.GetTask(ctx, tasks[0].ID)
	require.NoError(t, err)
	require.Equal(t, state.StepRunning, task.Steps[0].State, "the claim was saved before the server died")
	require.Equal(t, w.id, task.Steps[0].EngineID)

	second := startServeProcess(t, db)
	w.base = second.url
	interval := time.Duration(reg.HeartbeatIntervalMS) * time.Millisecond
	deadline := time.Now().Add(time.Duration(reg.LeaseTTLMS) * time.Millisecond)
	var got []wire.ClaimedStep
	for len(got) == 0 {
		require.True(t, time.Now().Before(deadline), "the step was not released within a lease period")
		w.heartbeat() // holds nothing: it never received the step
		got, err = w.claim()
		require.NoError(t, err)
		if len(got) == 0 {
			time.Sleep(interval / 4) // the worker's own heartbeat cadence, not a wait for the engine
		}
	}
	require.Equal(t, 1, got[0].Attempt, "the released claim gave its attempt back: the step never ran")
	_, err = w.call("POST", "/v1/workers/"+w.id+"/complete", wire.Complete{Fence: &got[0].Fence, Result: json.RawMessage(`"done"`)}, nil)
	require.NoError(t, err)

	task, err = s.GetTask(ctx, tasks[0].ID)
	require.NoError(t, err)
	require.Equal(t, state.TaskCompleted, task.State)
	trail, err := s.Audit(ctx, task.ID)
	require.NoError(t, err)
	var released int
	for _, a := range trail {
		if strings.Contains(a.Reason, "not held by its worker") {
			released++
		}
	}
	require.Equal(t, 1, released, "the audit trail says why the step went back to ready")
}

// TestServeStopsClaimingOnSignal: on SIGTERM `weft serve` claims nothing
// more and a remote worker's waiting claim ends at once (empty), so the
// server exits without waiting out its drain. Before, the engine stopped
// claiming only once the HTTP server had shut down, which a waiting claim
// held open to the drain deadline while the engine claimed and ran new
// work.
func TestServeStopsClaimingOnSignal(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "weft.db")
	token := createKey(t, db, "worker", "workers:connect")
	srv := startServeProcess(t, db, "--drain", "60s")
	w := &wireWorker{t: t, base: srv.url, token: token}
	reg := w.register()
	s, err := sqlite.Open(t.Context(), db, sqlite.Options{ReadOnly: true})
	require.NoError(t, err)
	defer s.Close()
	beat := func() time.Time {
		ws, err := s.ListWorkers(t.Context())
		require.NoError(t, err)
		for _, x := range ws {
			if x.ID == w.id {
				return x.HeartbeatAt
			}
		}
		return time.Time{}
	}
	registered := beat()
	body, err := json.Marshal(wire.ClaimRequest{Handlers: []string{"remote.work"}, Max: 1, WaitMS: reg.MaxWaitMS})
	require.NoError(t, err)
	req, err := http.NewRequestWithContext(t.Context(), "POST", srv.url+"/v1/workers/"+w.id+"/claim", bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	waited := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			data, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("claim: %d %s", resp.StatusCode, data)
			}
		}
		waited <- err
	}()
	// The claim renews the worker's lease as it starts: it is in the
	// server's hands, and would hold its shutdown open.
	deadline := time.Now().Add(30 * time.Second)
	for !beat().After(registered) {
		require.True(t, time.Now().Before(deadline), "the claim never reached the server")
		time.Sleep(5 * time.Millisecond) // polling the database file, not waiting for the server's work
	}
	require.NoError(t, srv.cmd.Process.Signal(syscall.SIGTERM))
	begun := time.Now()
	exited := make(chan error, 1)
	go func() { exited <- srv.stop() }()
	select {
	case err := <-exited:
		require.NoError(t, err, srv.logs.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("weft serve was still draining 30 s after SIGTERM, with nothing running:\n%s", srv.logs.String())
	}
	t.Logf("weft serve exited %s after SIGTERM", time.Since(begun).Round(time.Millisecond))
	require.NoError(t, <-waited, "the waiting claim ends empty")
}
