package chaos

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// The faults the run injects, and how it tells that the work recovered.

// running lists the steps running now, as "TASK STEP".
func (r *runner) running(ctx context.Context) ([]string, error) {
	rows, err := r.db.QueryContext(ctx, `SELECT task_id, name FROM steps WHERE state = 'running'`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id int64
		var name string
		if err := rows.Scan(&id, &name); err != nil {
			return nil, err
		}
		out = append(out, fmt.Sprintf("%d %s", id, name))
	}
	return out, rows.Err()
}

// inject injects one fault and returns its recovery time: from the fault
// until every step that was running at the fault has ended and at least one
// step completion has been recorded after it, or no step is left ready or
// running (polled every 20 ms, bounded at 2 minutes).
func (r *runner) inject(ctx context.Context, fault string) (time.Duration, error) {
	var held []string
	var completedBefore int
	err := retry(ctx, func() (err error) {
		if held, err = r.running(ctx); err != nil {
			return err
		}
		return r.db.QueryRowContext(ctx, `SELECT count(*) FROM steps WHERE state = 'completed'`).Scan(&completedBefore)
	})
	if err != nil {
		return 0, err
	}
	at := time.Now()
	switch fault {
	case FaultKillWorker:
		live := r.live()
		victim := live[r.rng.IntN(len(live))]
		if err := victim.Signal(syscall.SIGKILL); err != nil && !victim.Exited() {
			return 0, err
		}
		_ = victim.Wait() // reaped: its pid is gone, the others see it died
		r.retire(victim)
		if err := r.gone(victim.PID()); err != nil {
			return 0, err
		}
		if err := r.startWorker(); err != nil {
			return 0, err
		}
	case FaultRollingRestart:
		if err := r.rollingRestart(ctx); err != nil {
			return 0, err
		}
	case FaultKillServe:
		pid := r.srv.PID()
		r.srv.Kill()
		if err := r.gone(pid); err != nil {
			return 0, err
		}
		if err := r.startServer(ctx); err != nil {
			return 0, err
		}
	case FaultTerminatePG:
		var n int
		if err := r.db.QueryRowContext(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1`, r.appName).Scan(&n); err != nil {
			return 0, err
		}
		r.logf("terminated %d backends", n)
	case FaultRestartPG:
		if err := r.pgctl(ctx, "restart", "-m", "fast"); err != nil {
			return 0, err
		}
	case FaultFillDisk:
		if err := r.fillDisk(time.Duration(300+r.rng.IntN(700)) * time.Millisecond); err != nil {
			return 0, err
		}
	}
	bound := at.Add(2 * time.Minute)
	for time.Now().Before(bound) {
		if r.recovered(ctx, held, completedBefore) {
			return time.Since(at), nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.logf("%s: not recovered after 2m (held %v)", fault, held)
	return time.Since(at), nil
}

func (r *runner) recovered(ctx context.Context, held []string, completedBefore int) bool {
	var completed, runnable int
	if err := r.db.QueryRowContext(ctx, `SELECT count(*) FROM steps WHERE state = 'completed'`).Scan(&completed); err != nil {
		return false
	}
	if err := r.db.QueryRowContext(ctx, `SELECT count(*) FROM steps WHERE state IN ('ready', 'running')`).Scan(&runnable); err != nil {
		return false
	}
	// Work must move again, unless there is none to do (every open step
	// waits for a signal the next cycle sends).
	if completed <= completedBefore && runnable > 0 {
		return false
	}
	now, err := r.running(ctx)
	if err != nil {
		return false
	}
	// A step running again now was reclaimed and rerun, or still runs: not
	// done. (A held step that ended and whose name is reused cannot happen:
	// names are unique within a task.)
	for _, k := range held {
		if slices.Contains(now, k) {
			return false
		}
		id, name, _ := strings.Cut(k, " ")
		var st, kind string
		if err := r.db.QueryRowContext(ctx, `SELECT s.state, s.kind FROM steps s WHERE s.task_id = `+id+` AND s.name = `+placeholder(r.cfg.Store), name).Scan(&st, &kind); err != nil {
			return false
		}
		// A signal step runs only while its wait begins: waiting, it has
		// moved on (its signal comes with the next cycle).
		moved := state.Step(st).Terminal() || (kind == store.KindSignal && state.Step(st) == state.StepWaiting)
		if !moved {
			return false
		}
	}
	return true
}

// pgctl runs pg_ctl ACTION on the scripts/pgtest cluster, as that script
// does (as the postgres user when root).
func (r *runner) pgctl(ctx context.Context, action string, args ...string) error {
	dir := r.cfg.PGDir
	bindir, err := os.ReadFile(filepath.Join(dir, "bindir"))
	if err != nil {
		return err
	}
	argv := []string{filepath.Join(strings.TrimSpace(string(bindir)), "pg_ctl"), action, "-D", filepath.Join(dir, "data"), "-w", "-t", "30", "-l", filepath.Join(dir, "log")}
	argv = append(argv, args...)
	if os.Geteuid() == 0 {
		argv = append([]string{"runuser", "-u", "postgres", "--"}, argv...)
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %v\n%s", strings.Join(argv, " "), err, out)
	}
	return nil
}

// mountVolume mounts a size-limited tmpfs under dir for the SQLite file. It
// needs the right to mount (root on Linux); the caller goes on without the
// disk-full fault otherwise.
func mountVolume(dir string) (string, func(), error) {
	vol := filepath.Join(dir, "volume")
	if err := os.Mkdir(vol, 0o755); err != nil {
		return "", nil, err
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+volumeSize, "tmpfs", vol).CombinedOutput(); err != nil {
		return "", nil, fmt.Errorf("mount tmpfs: %v %s", err, bytes.TrimSpace(out))
	}
	return vol, func() { _ = exec.Command("umount", "-l", vol).Run() }, nil
}

// fillDisk fills the volume until writing fails for want of space, holds it
// full for d, and frees it.
func (r *runner) fillDisk(d time.Duration) error {
	filler := filepath.Join(r.volume, "filler")
	f, err := os.Create(filler)
	if err != nil {
		return err
	}
	block := make([]byte, 1<<20)
	for {
		if _, err := f.Write(block); err != nil {
			break // full
		}
	}
	_ = f.Close()
	r.logf("the database volume is full for %s", d)
	time.Sleep(d)
	return os.Remove(filler)
}

// gone appends "gone PID" to the ledger once the process has ended: the
// runs it had are over (Overlaps).
func (r *runner) gone(pid int) error {
	return appendLine(r.ledger, fmt.Sprintf("gone %d", pid))
}
