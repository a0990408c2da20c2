package model

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/weftrun/weft/wire"
)

// remoteRuns is the work of the cluster's remote worker (a
// wireworker.Worker): it records each run's start and end in the ledger
// (runner "rN", engine "remote") and knows which runs are in progress.
// The model's lease-expiry op makes the worker abandon what it holds
// (wireworker.Worker.Abandon): the server must take the steps back and
// run them again.
type remoteRuns struct {
	ledger string
	mu     sync.Mutex
	active map[string]bool // runners in progress
	n      int
}

func (w *remoteRuns) isActive(runner string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.active[runner]
}

func (w *remoteRuns) record(line string) {
	f, err := os.OpenFile(w.ledger, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	_, _ = f.WriteString(line + "\n")
	_ = f.Close()
}

// work runs a claimed step: 80 ms, between its start and end lines.
func (w *remoteRuns) work(ctx context.Context, s wire.ClaimedStep) json.RawMessage {
	w.mu.Lock()
	w.n++
	runner := fmt.Sprintf("r%d", w.n)
	w.active[runner] = true
	w.mu.Unlock()
	name := strings.ReplaceAll(s.Step, " ", "_")
	w.record(fmt.Sprintf("start %d %s %d %s remote", s.TaskID, name, s.Attempt, runner))
	sleepCtx(ctx, 80*time.Millisecond) // the work
	w.record(fmt.Sprintf("end %d %s %d %s remote", s.TaskID, name, s.Attempt, runner))
	w.mu.Lock()
	delete(w.active, runner)
	w.mu.Unlock()
	return json.RawMessage(fmt.Sprintf(`{"task": %d, "by": "remote"}`, s.TaskID))
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
