package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/store/sqlite"
	"github.com/weftrun/weft/wire"
)

// TestWorkerRepeatedSignals sends a real `weft worker` two signals while an
// exec step runs. Whatever the second one, the process is not killed by it:
// it exits 0 with its engine marked stopped, and `weft workers` no longer
// lists it. A repeated SIGTERM leaves the drain alone (the step completes);
// a second SIGINT cuts it short (the step's command is killed and the step
// left to be reclaimed).
func TestWorkerRepeatedSignals(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the weft binary")
	}
	t.Parallel()
	bin, err := buildWeft()
	require.NoError(t, err)
	for _, tc := range []struct {
		name    string
		second  syscall.Signal
		sleep   string // how long the step works
		drained bool   // the step completes before the worker exits
	}{
		{name: "sigterm-twice", second: syscall.SIGTERM, sleep: "2", drained: true},
		{name: "sigint-twice", second: syscall.SIGINT, sleep: "60", drained: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			db := filepath.Join(dir, "weft.db")
			pidFile := filepath.Join(dir, "pid")
			tpl := writeFile(t, dir, "long.yaml", `namespace: sig
name: long
version: "1"
steps:
  - name: s
    handler: exec
    config: {command: ["/bin/sh", "-c", "echo $$ > `+pidFile+`.tmp && mv `+pidFile+`.tmp `+pidFile+`; sleep `+tc.sleep+`; echo '{\"done\": true}'"]}
`)
			out, err := exec.Command(bin, "submit", tpl, "--db", db).CombinedOutput()
			require.NoError(t, err, "%s", out)

			w := exec.Command(bin, "worker", "--db", db, "--drain", "2m")
			var stderr syncBuffer
			w.Stderr = &stderr
			require.NoError(t, w.Start())
			exited := make(chan error, 1)
			go func() { exited <- w.Wait() }()
			t.Cleanup(func() { _ = w.Process.Kill() })
			child := waitPIDFile(t, pidFile, func() string { return "the step never started:\n" + stderr.String() })

			first := syscall.SIGTERM
			if tc.second == syscall.SIGINT {
				first = syscall.SIGINT
			}
			require.NoError(t, w.Process.Signal(first))
			// The worker has handled the first signal once it says it stops.
			poll(t, 30*time.Second, func() string { return "the worker never began to stop:\n" + stderr.String() }, func() bool {
				return strings.Contains(stderr.String(), "worker stopping")
			})
			require.NoError(t, w.Process.Signal(tc.second))

			select {
			case err := <-exited:
				var xe *exec.ExitError
				if errors.As(err, &xe) {
					t.Fatalf("the worker did not exit cleanly (%v):\n%s", xe.ProcessState, stderr.String())
				}
				require.NoError(t, err)
			case <-time.After(45 * time.Second):
				t.Fatalf("the worker did not exit:\n%s", stderr.String())
			}

			r := weftCLI(t, "workers", "--json", "--db", db)
			requireCode(t, 0, r)
			var live []wire.Worker
			require.NoError(t, json.NewDecoder(bytes.NewReader([]byte(r.stdout))).Decode(&live))
			for _, l := range live {
				require.NotEqual(t, w.Process.Pid, l.PID, "the stopped worker is listed live: %+v", l)
			}
			engines := engineStatesSQLite(t, db)
			require.Len(t, engines, 1)
			for id, st := range engines {
				require.Equal(t, "stopped", st, "engine %s", id)
			}

			r = weftCLI(t, "task", "1", "--json", "--db", db)
			task := decodeTask(t, r.stdout)
			if tc.drained {
				require.Equal(t, "completed", string(task.State), "the drain let the step finish")
			} else {
				require.NotEqual(t, "completed", string(task.State), "the drain was cut short")
				require.True(t, processGone(child), "the step's command %d outlived the cut-short drain", child)
			}
		})
	}
}

// engineStatesSQLite returns the state of every engine registered in a
// SQLite database, by id.
func engineStatesSQLite(t *testing.T, path string) map[string]string {
	t.Helper()
	s, err := sqlite.Open(t.Context(), path, sqlite.Options{})
	require.NoError(t, err)
	defer s.Close()
	states, _ := engineStates(t, s.DB())
	return states
}
