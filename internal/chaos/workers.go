package chaos

import (
	"context"
	"fmt"
	"slices"
	"syscall"
	"time"

	"github.com/weftrun/weft/internal/weftproc"
)

// The run's `weft worker` processes: r.workers are those the run has not
// stopped (one may have died by itself), r.retired those it killed or
// stopped, kept for their stderr.

func (r *runner) startWorker() error {
	w := &weftproc.Proc{Name: "worker", Args: []string{"worker", "--db", r.url, "--concurrency", "6"}}
	if err := w.Start(r.bin); err != nil {
		return err
	}
	r.workers = append(r.workers, w)
	return nil
}

// live returns the workers the run has not stopped.
func (r *runner) live() []*weftproc.Proc { return slices.Clone(r.workers) }

// retire records that the run stopped or killed w.
func (r *runner) retire(w *weftproc.Proc) {
	r.workers = slices.DeleteFunc(r.workers, func(x *weftproc.Proc) bool { return x == w })
	r.retired = append(r.retired, w)
}

// stopWorkers sends every worker SIGTERM, then waits up to 15 s for each
// to exit (and kills it then).
func (r *runner) stopWorkers() {
	for _, w := range r.workers {
		if !w.Exited() {
			_ = w.Signal(syscall.SIGTERM)
		}
	}
	for _, w := range r.workers {
		select {
		case <-w.Done():
		case <-time.After(15 * time.Second):
			w.Kill()
		}
	}
}

// waitLive waits until the engine of each of the processes pids is live:
// the next fault must not hit one still starting (counting live engines
// would count the run's own and the server's).
func (r *runner) waitLive(ctx context.Context, pids []int) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		missing, err := r.notLive(ctx, pids)
		if err == nil && len(missing) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the engines of processes %v are not live (%v)", missing, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// notLive returns those of pids whose engine is not live.
func (r *runner) notLive(ctx context.Context, pids []int) ([]int, error) {
	rows, err := r.db.QueryContext(ctx, `SELECT pid FROM engines WHERE state = 'live'`)
	if err != nil {
		return pids, err
	}
	defer rows.Close()
	live := map[int]bool{}
	for rows.Next() {
		var pid int
		if err := rows.Scan(&pid); err != nil {
			return pids, err
		}
		live[pid] = true
	}
	if err := rows.Err(); err != nil {
		return pids, err
	}
	return slices.DeleteFunc(slices.Clone(pids), func(pid int) bool { return live[pid] }), nil
}

// pids returns the process ids of the workers the run has not stopped.
func (r *runner) pids() []int {
	out := make([]int, 0, len(r.workers))
	for _, w := range r.workers {
		out = append(out, w.PID())
	}
	return out
}
