package chaos

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/weftrun/weft"
)

// The rolling restarts (FaultRollingRestart): the workers' short lease,
// the long steps that outlast it, and the restarts themselves.

// The workers' lease for the rolling restarts, set through WEFT_LEASE_TTL
// and WEFT_HEARTBEAT_INTERVAL where the CLI reads them. The long steps
// work for two leases: an engine that stopped heartbeating when told to
// stop would have its steps reaped and run elsewhere while it still ran
// them. The lease outlasts the database faults (a heartbeat that fails
// is retried after 1 s, then 2 s).
const (
	chaosLeaseTTL  = 5 * time.Second
	chaosHeartbeat = time.Second
	longStep       = 2 * chaosLeaseTTL
)

// longTemplate is the work of the rolling restarts: one step that works
// longer than the workers' lease.
const longTemplate = `namespace: chaos
name: long
version: "1"
steps:
  - name: long
    handler: exec
    retry: {max_attempts: 20, backoff: fixed, initial: 20ms}
    config: {command: ["/bin/sh", %[1]q, %[2]q, %[3]q]}
`

// shortLease makes the workers' lease shorter than the long steps, for
// the rolling restarts: r.bin becomes a wrapper that sets it for every
// weft process of the run (the binary itself is not changed). It returns
// how long the long steps work. A CLI without engine.lease_ttl keeps its
// lease (30 s by default): the long steps then work for a second only,
// and rolling restarts check clean drains without a lease to outlast.
func (r *runner) shortLease(ctx context.Context) (time.Duration, error) {
	out, err := exec.CommandContext(ctx, r.bin, "config").CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("weft config: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "engine.lease_ttl") {
		r.logf("this weft takes no engine.lease_ttl: workers keep their default lease, long steps work 1s")
		return time.Second, nil
	}
	wrapper := filepath.Join(r.dir, "weft-chaos")
	script := fmt.Sprintf("#!/bin/sh\nWEFT_LEASE_TTL=%s WEFT_HEARTBEAT_INTERVAL=%s\nexport WEFT_LEASE_TTL WEFT_HEARTBEAT_INTERVAL\nexec %q \"$@\"\n",
		chaosLeaseTTL, chaosHeartbeat, r.bin)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		return 0, err
	}
	r.bin = wrapper
	r.logf("workers run with a %s lease; long steps work %s", chaosLeaseTTL, longStep)
	return longStep, nil
}

// rollingRestart stops each worker in turn with SIGTERM, as a deploy does,
// and starts a new one in its place before it stops the next. Before each
// stop it submits a few chaos/long tasks (fewer than the engines have
// slots) and sends the signal once the worker runs one of their steps,
// which work longer than the lease (if one comes within ten seconds). The
// worker must drain and exit 0 within its drain (30 s).
func (r *runner) rollingRestart(ctx context.Context) error {
	for _, w := range r.live() {
		pid := w.PID()
		// A few per engine (the server's too), leaving slots free: a step
		// reaped from a draining worker would be run elsewhere at once.
		subs := make([]weft.Submission, 2*(len(r.live())+1))
		for i := range subs {
			subs[i] = weft.Submission{Workflow: "chaos/long", Input: map[string]int{"worker": pid, "i": i}}
		}
		err := retry(ctx, func() error {
			sr, err := r.eng.SubmitMany(ctx, subs)
			for _, s := range sr {
				r.extra = append(r.extra, s.Task.ID)
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("submit long tasks: %w", err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) && r.runsLong(ctx, pid) == 0 {
			time.Sleep(20 * time.Millisecond)
		}
		held := r.runsLong(ctx, pid)
		if err := w.Signal(syscall.SIGTERM); err != nil {
			// Gone before its turn: what it printed says why.
			return fmt.Errorf("worker %d, to stop with SIGTERM: %w\n%s", pid, err, w.Tail(20))
		}
		select {
		case <-w.Done():
			if err := w.Wait(); err != nil {
				return fmt.Errorf("worker %d stopped with SIGTERM while it ran %d long steps: %v\n%s", pid, held, err, w.Tail(10))
			}
		case <-time.After(45 * time.Second):
			w.Kill()
			return fmt.Errorf("worker %d did not stop within 45 s of SIGTERM\n%s", pid, w.Tail(10))
		}
		r.retire(w)
		if err := r.gone(pid); err != nil {
			return err
		}
		r.logf("worker %d drained %d long steps and stopped", pid, held)
		if err := r.startWorker(); err != nil {
			return err
		}
	}
	return r.waitLive(ctx, r.pids())
}

// runsLong counts the long steps running under the engine of process pid.
func (r *runner) runsLong(ctx context.Context, pid int) int {
	var n int
	q := `SELECT count(*) FROM steps s JOIN engines e ON e.id = s.engine_id
		WHERE s.state = 'running' AND s.name = 'long' AND e.pid = ` + placeholder(r.cfg.Store)
	if err := r.db.QueryRowContext(ctx, q, pid).Scan(&n); err != nil {
		return 0
	}
	return n
}
