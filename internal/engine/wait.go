package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/weftrun/weft/internal/ident"

	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/workflow"
)

// This file holds what Wait waits on: the tasks the engine's callers wait
// for, whose states one loop reads in one statement whenever a transaction
// of the engine's store ends a task (store.TaskEnder; on a store that does
// not tell, after each batch of outcomes the engine records) and every
// WaitPoll (a task may end on another engine), so that a thousand waiters
// cost one read an end, not a thousand. The loop runs while anyone waits.

// WaitPoll is how often the states of the tasks waited for are read when
// the store tells of no end.
const WaitPoll = 100 * time.Millisecond

// waitRead bounds one read of the states.
const waitRead = 30 * time.Second

// waits are the engine's waiters, by task.
type waits struct {
	mu     sync.Mutex
	byTask map[int64][]chan error
	// running: the loop runs; kick wakes it to read at once (a new
	// waiter).
	running bool
	kick    chan struct{}
}

// add registers a waiter for task id, starting the loop if it does not
// run. The channel receives nil once the task has ended, or the error
// that ended the wait (the task is not found, a read failed).
func (w *waits) add(e *Engine, id int64) chan error {
	done := make(chan error, 1)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.byTask == nil {
		w.byTask, w.kick = map[int64][]chan error{}, make(chan struct{}, 1)
	}
	w.byTask[id] = append(w.byTask[id], done)
	if !w.running {
		w.running = true
		go e.waitLoop()
	}
	select {
	case w.kick <- struct{}{}:
	default:
	}
	return done
}

// remove unregisters a waiter (one that was answered is gone already).
func (w *waits) remove(id int64, done chan error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.byTask[id] = slices.DeleteFunc(w.byTask[id], func(c chan error) bool { return c == done })
	if len(w.byTask[id]) == 0 {
		delete(w.byTask, id)
	}
}

// ids returns the tasks waited for, sorted; none stops the loop (ok
// false) under the lock a new waiter takes to start it.
func (w *waits) ids() (ids []int64, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.byTask) == 0 {
		w.running = false
		return nil, false
	}
	return slices.Sorted(maps.Keys(w.byTask)), true
}

// answer answers the waiters of the tasks of ids that ended, or are not
// found, by states; or all of them with err.
func (w *waits) answer(ids []int64, states map[int64]state.Task, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, id := range ids {
		var why error
		st, found := states[id]
		switch {
		case err != nil:
			why = err
		case !found:
			why = fmt.Errorf("task %d: %w", id, store.ErrNotFound)
		case !st.Terminal():
			continue
		}
		for _, c := range w.byTask[id] {
			c <- why
		}
		delete(w.byTask, id)
	}
}

// waitLoop reads the states of the tasks waited for, until none is.
func (e *Engine) waitLoop() {
	t := time.NewTicker(WaitPoll)
	defer t.Stop()
	ender, _ := e.store.(store.TaskEnder)
	for {
		ids, ok := e.waits.ids()
		if !ok {
			return
		}
		// Taken before the read: a batch recorded during it wakes the
		// next read. A store that tells which of its transactions ended
		// a task wakes it only for those.
		var settled <-chan struct{}
		if ender != nil {
			settled = ender.TaskEnded()
		} else {
			settled = e.completer.settled.C()
		}
		ctx, cancel := context.WithTimeout(context.Background(), waitRead)
		states, err := e.store.TaskStates(ctx, ids)
		cancel()
		if err != nil {
			err = fmt.Errorf("wait for tasks: %w", err)
		}
		e.waits.answer(ids, states, err)
		select {
		case <-settled:
		case <-t.C:
		case <-e.waits.kick:
		}
	}
}

// Wait blocks until the task ends or ctx is done, and returns the task.
// However many wait, the engine reads the states of all the tasks waited
// for in one statement (waits), when its store ended a task (or, on a
// store that does not tell, after each batch of outcomes it records) and
// every WaitPoll, for tasks that end on engines elsewhere.
func (e *Engine) Wait(ctx context.Context, id int64) (*store.Task, error) {
	done := e.waits.add(e, id)
	defer e.waits.remove(id, done)
	select {
	case err := <-done:
		if err != nil {
			return nil, err
		}
		return e.store.GetTask(ctx, id)
	case <-ctx.Done():
		task, err := e.store.GetTask(context.WithoutCancel(ctx), id)
		if err != nil {
			return nil, errors.Join(ctx.Err(), err)
		}
		return task, ctx.Err()
	}
}

// signalWait is how the built-in handler of signal steps
// (store.SignalHandler) asks settle for the outcome that begins the step's
// wait: the wait begins under a claim, so that the task starts as it does
// with any step, under the policies of the one claim path.
type signalWait struct{ signal string }

func (w *signalWait) Error() string { return fmt.Sprintf("waiting for signal %q", w.signal) }

// Signal sends a named signal with a payload (encoded as JSON; nil means
// null) to a task. The task's first step waiting for that name completes
// with {"signal": name, "payload": payload} as its result; if none waits
// yet, the signal is kept for the next step that begins to. It reports
// whether a waiting step took it at once. A task that has ended is
// ErrConflict.
func (e *Engine) Signal(ctx context.Context, taskID int64, name string, payload any, actor string) (bool, error) {
	if actor == "" {
		actor = e.ID()
	}
	if !workflow.ValidName(name) {
		return false, fmt.Errorf("signal: %w", store.Invalidf("name", "%q: use %s", name, ident.Rule))
	}
	var raw json.RawMessage
	if payload == nil {
		raw = json.RawMessage("null")
	} else {
		var err error
		if raw, err = encodeInput(payload); err != nil {
			return false, fmt.Errorf("%w signal payload: %w", store.ErrInvalid, err)
		}
	}
	delivered, err := e.store.Signal(ctx, taskID, name, raw, actor)
	if err != nil {
		return false, fmt.Errorf("signal %q to task %d: %w", name, taskID, err)
	}
	return delivered, nil
}
