package model

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/weftrun/weft/internal/durable"
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

// work runs a claimed step: 80 ms, between its start and end lines. A
// step call of the model's durable function runs the function up to it,
// whose code is that work.
func (w *remoteRuns) work(ctx context.Context, s wire.ClaimedStep) json.RawMessage {
	if s.Kind == "call" {
		_, result, err := durable.RunRemote(ctx, s, w.function(s))
		if err != nil {
			return json.RawMessage(fmt.Sprintf(`{"error": %q}`, err.Error()))
		}
		return result
	}
	return w.run(ctx, s)
}

// run is the work of a step: 80 ms, between its start and end lines.
func (w *remoteRuns) run(ctx context.Context, s wire.ClaimedStep) json.RawMessage {
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

// function is the model's durable function (workflow mb/fn, handler
// remote.work): a step, a durable sleep, a wait for the signal "go" (which
// OpSignal sends), and a step. Its steps' code is the remote worker's work,
// in the ledger under their names.
func (w *remoteRuns) function(s wire.ClaimedStep) durable.Func {
	return func(r *durable.Replay, input json.RawMessage) (json.RawMessage, error) {
		step := func(name string) (json.RawMessage, error) {
			return r.Call(name, durable.Request{Item: durable.Item{Call: durable.CallStep}}, func(ctx context.Context) (json.RawMessage, error) {
				return w.run(ctx, wire.ClaimedStep{TaskID: s.TaskID, Step: name, Attempt: s.Attempt}), nil
			}).Wait()
		}
		if _, err := step("a"); err != nil {
			return nil, err
		}
		if _, err := r.Call("nap", durable.Request{Item: durable.Item{Call: durable.CallSleep}, Until: time.Now().Add(100 * time.Millisecond)}, nil).Wait(); err != nil {
			return nil, err
		}
		if _, err := r.Call("go", durable.Request{Item: durable.Item{Call: durable.CallSignal}, Signal: "go", Timeout: time.Hour}, nil).Wait(); err != nil {
			return nil, err
		}
		return step("b")
	}
}

// drive runs the function step of the model's durable function: the calls
// to record, or its result.
func (w *remoteRuns) drive(ctx context.Context, s wire.ClaimedStep) ([]wire.Call, json.RawMessage, error) {
	calls, result, err := durable.RunRemote(ctx, s, w.function(s))
	if err != nil {
		return nil, nil, fmt.Errorf("the model's function: %w", err)
	}
	return calls, result, nil
}
