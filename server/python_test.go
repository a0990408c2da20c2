package server_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/server"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/wire"
)

// TestPythonWorker runs the example Python worker (clients/python) as a real
// process against a Go program that embeds an engine with Go handlers and
// serves its API on a loopback port — how a team mixing Go and Python runs
// weft. A task of Go -> Python -> Go steps must complete with results
// flowing through all three.
func TestPythonWorker(t *testing.T) {
	t.Parallel()
	python, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("python3 is required in CI for the remote-worker test")
		}
		t.Skip("python3 is not installed")
	}
	_, file, _, _ := runtime.Caller(0)
	example := filepath.Join(filepath.Dir(file), "..", "clients", "python", "example_worker.py")
	eachBackend(t, func(t *testing.T, open storeFactory) {
		en := newEnv(t, open(t), server.Options{})
		en.register(mixedTemplate)
		cmd := exec.Command(python, "-u", example)
		cmd.Env = append(os.Environ(), "WEFT_SERVER="+en.url, "WEFT_TOKEN="+en.key(server.PermWorkersConnect), "WEFT_NAMESPACES=demo",
			"PYTHONDONTWRITEBYTECODE=1")
		var out syncBuffer
		cmd.Stdout, cmd.Stderr = &out, &out
		cmd.WaitDelay = 5 * time.Second
		require.NoError(t, cmd.Start())
		exited := make(chan struct{})
		var waitErr error
		go func() { waitErr = cmd.Wait(); close(exited) }()
		t.Cleanup(func() {
			select {
			case <-exited:
			default:
				_ = cmd.Process.Kill()
				<-exited
			}
		})

		var ids []int64
		for _, n := range []int{3, 7} {
			var task wire.Task
			en.ok(201, "POST", "/v1/tasks", map[string]any{"workflow": "demo/mixed", "input": map[string]int{"n": n}}, &task)
			ids = append(ids, task.ID)
		}
		for i, n := range []int{3, 7} {
			task := en.waitTask(ids[i])
			require.Equal(t, state.TaskCompleted, task.State, "worker output:\n%s", out.String())
			enrich := stepNamed(t, task, "enrich")
			require.JSONEq(t, `{"n":`+itoa(int64(10*n))+`,"by":"python","attempt":1}`, string(enrich.Result))
			require.Contains(t, enrich.EngineID, "remote-example-", "run by the Python worker")
			require.JSONEq(t, `{"n":`+itoa(int64(11*n))+`}`, string(stepNamed(t, task, "finish").Result),
				"the Python result reached the Go step after it")
		}

		// SIGTERM: the worker drains and deregisters.
		require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
		select {
		case <-exited:
			require.NoError(t, waitErr, "worker output:\n%s", out.String())
		case <-time.After(30 * time.Second):
			t.Fatalf("the Python worker did not stop on SIGTERM; output:\n%s", out.String())
		}
	})
}
