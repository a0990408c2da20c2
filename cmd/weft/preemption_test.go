package main

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/state"
)

// crunchYAML is a preemptible step that saves a checkpoint and then works
// for a long time; run again, it finds its checkpoint on stdin and ends.
const crunchYAML = `namespace: ops
name: crunch
version: "1"
steps:
  - name: crunch
    handler: exec
    priority: -5
    preemptible: true
    config:
      command: ["sh", "-c", "if grep -q '\"row\"'; then echo '{\"resumed\": true}'; else printf '{\"checkpoint\": {\"row\": 40}}\\n' >&3; sleep 60; fi"]
`

const pageYAML = `namespace: ops
name: page
version: "1"
steps:
  - name: alert
    handler: exec
    priority: 10
    config: { command: ["sh", "-c", "echo '{\"paged\": true}'"] }
`

// TestPreemptionFromTheCLI runs the session of docs/policies.md: a worker
// with one slot runs a preemptible step; a more urgent task stops it, runs,
// and the preempted step resumes from its checkpoint without using an
// attempt.
func TestPreemptionFromTheCLI(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "weft.db")
	crunch := writeFile(t, dir, "crunch.yaml", crunchYAML)
	page := writeFile(t, dir, "page.yaml", pageYAML)
	requireCode(t, 0, weftCLI(t, "submit", crunch, "--db", db)) // task 1

	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	worker := make(chan result, 1)
	go func() {
		worker <- weftIn(ctx, "", "worker", "--db", db, "--concurrency", "1", "--drain", "5s")
	}()
	// Running, and its checkpoint saved: preempted before that, it would
	// start over and work for a minute.
	require.Eventually(t, func() bool {
		task := taskJSON(t.Context(), db, 1)
		return task != nil && task.State == state.TaskRunning && len(task.Steps) == 1 && len(task.Steps[0].Checkpoint) > 0
	}, 10*time.Second, 10*time.Millisecond)
	requireCode(t, 0, weftCLI(t, "submit", page, "--db", db)) // task 2
	require.Eventually(t, func() bool {
		return taskState(t.Context(), db, 1) == state.TaskCompleted && taskState(t.Context(), db, 2) == state.TaskCompleted
	}, 20*time.Second, 20*time.Millisecond, "task 1: %s\ntask 2: %s",
		weftCLI(t, "task", "1", "--audit", "--db", db).stdout, weftCLI(t, "task", "2", "--audit", "--db", db).stdout)
	stop()
	requireCode(t, 0, <-worker)

	r := weftCLI(t, "task", "1", "--audit", "--db", db)
	requireCode(t, 0, r)
	require.Contains(t, r.stdout, `preempted by task 2 step "alert" (priority 10)`)
	// The preempted attempt was given back; the second run found its
	// checkpoint.
	require.Regexp(t, `crunch\s+completed\s+1/3\s+-\s+\{"resumed":true\}`, r.stdout)
}
