package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/url"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/client"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/store/sqlite"
	"github.com/weftrun/weft/wire"
)

// TestServeKilledUnderGRPCWorker kills `weft serve` while a Go gRPC worker
// holds a step on its push stream, and starts it again on the same
// address: the worker reconnects, its report of the step it kept running
// lands on the new server, and the step completes once, in its first
// attempt (its lease outlived the outage). The stream then takes the next
// task's step.
func TestServeKilledUnderGRPCWorker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	db := filepath.Join(dir, "weft.db")
	tpl := writeFile(t, dir, "remote.yaml", "namespace: crash\nname: grpc\nversion: \"1\"\nsteps:\n  - name: work\n    handler: remote.work\n")
	token := createKey(t, db, "worker", "workers:connect")
	r := weftCLI(t, "--db", db, "submit", tpl)
	requireCode(t, 0, r)

	first := startServeProcess(t, db)
	u, err := url.Parse(first.url)
	require.NoError(t, err)

	started := make(chan string, 2)
	release := make(chan struct{})
	w, err := client.NewGRPCWorker(client.WorkerConfig{URL: first.url, Token: token, Slots: 1, MinBackoff: 20 * time.Millisecond,
		MaxBackoff: 500 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	w.Handle("remote.work", func(ctx context.Context, step wire.ClaimedStep) (json.RawMessage, error) {
		started <- step.Step
		select {
		case <-release:
			return json.RawMessage(`"done"`), nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	runCtx, stopWorker := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	defer func() {
		stopWorker()
		require.NoError(t, <-done)
	}()
	<-started // the worker holds the step

	require.NoError(t, first.cmd.Process.Signal(syscall.SIGKILL))
	_ = first.stop()
	second := startServeProcess(t, db, "--addr", u.Host)
	require.Equal(t, first.url, second.url, "the server is back on its address")
	close(release) // the handler returns; its report goes to the new server

	s, err := sqlite.Open(ctx, db, sqlite.Options{})
	require.NoError(t, err)
	defer s.Close()
	waitTasks := func(n int) []store.Task {
		deadline := time.Now().Add(60 * time.Second)
		for {
			tasks, err := s.ListTasks(ctx, store.TaskFilter{State: state.TaskCompleted})
			require.NoError(t, err)
			if len(tasks) >= n {
				return tasks
			}
			require.True(t, time.Now().Before(deadline), "%d of %d tasks completed", len(tasks), n)
			time.Sleep(20 * time.Millisecond)
		}
	}
	task, err := s.GetTask(ctx, waitTasks(1)[0].ID)
	require.NoError(t, err)
	require.Equal(t, 1, task.Steps[0].Attempts, "the step kept running through the outage: one attempt")
	require.JSONEq(t, `"done"`, string(task.Steps[0].Result))
	trail, err := s.Audit(ctx, task.ID)
	require.NoError(t, err)
	for _, a := range trail {
		require.NotContains(t, a.Reason, "lease lapsed")
		require.NotContains(t, a.Reason, "not held by its worker")
	}

	// The stream reconnected: the next task's step reaches the worker.
	requireCode(t, 0, weftCLI(t, "--db", db, "submit", tpl))
	select {
	case <-started:
	case <-time.After(60 * time.Second):
		t.Fatal("the worker's stream did not come back after the restart")
	}
	waitTasks(2)
}
