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

func (r *runner) waitLive(ctx context.Context, n int) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		var live int
		err := r.db.QueryRowContext(ctx, `SELECT count(*) FROM engines WHERE state = 'live'`).Scan(&live)
		if err == nil && live >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d workers registered (%v)", live, n, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
