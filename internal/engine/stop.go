package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/weftrun/weft/store"
)

// This file holds the end of an engine's run: Stop and its drain, and
// RunTask, which runs one task from Start to Stop.

// Stop shuts the engine down gracefully: it stops claiming, waits for
// running handlers until ctx ends (or ShutdownTimeout when ctx has no
// deadline), then cancels the rest, records the outcomes it has (giving up
// two seconds after the deadline if the database is unreachable: those
// steps are reclaimed and run again), and marks the engine stopped so that
// what it left is reclaimed at once. Until its outcomes are recorded the
// engine keeps heartbeating: its steps keep their leases however long they
// run, and a task cancelled meanwhile cancels its handler's context.
//
// A handler that still runs two stopGraces (four seconds) after its context was
// cancelled is left behind: Stop returns ErrHandlersAbandoned naming how
// many, and another engine reruns their steps.
//
// A Stop called while another drains waits for that one to finish and
// returns nil; if its ctx ends first, the drain ends there too: a second
// interrupt can cut a long drain short.
func (e *Engine) Stop(ctx context.Context) error {
	e.mu.Lock()
	if !e.started {
		e.mu.Unlock()
		return nil
	}
	if e.stopping {
		e.mu.Unlock()
		select {
		case <-e.stopped:
		case <-ctx.Done():
			e.hurryOnce.Do(func() { close(e.hurry) })
			<-e.stopped
		}
		return nil
	}
	e.stopping = true
	close(e.draining)
	e.mu.Unlock()
	defer close(e.stopped)
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, e.cfg.ShutdownTimeout)
		defer cancel()
	}
	// A later Stop whose ctx ends first ends this drain with it.
	ctx, cutShort := context.WithCancel(ctx)
	defer cutShort()
	go func() {
		select {
		case <-e.hurry:
			cutShort()
		case <-ctx.Done():
		}
	}()
	e.cancelRun()
	e.loops.Wait()
	// Claims made with a write of the engine's own are launched before the
	// handlers are waited for; one whose lease the completer is releasing
	// from an unreachable database gives up at the deadline.
	claimed := make(chan struct{})
	go func() { e.exec.claiming.Wait(); close(claimed) }()
	select {
	case <-claimed:
	case <-ctx.Done():
		e.completer.giveUp()
		<-claimed
	}
	drained := make(chan struct{})
	go func() { e.exec.handlerWG.Wait(); close(drained) }()
	var abandoned error // handlers that ignored their cancellation
	select {
	case <-drained:
	case <-ctx.Done():
		e.log.Warn("drain ended (deadline passed or cut short), cancelling running handlers", "engine_id", e.ID())
		e.exec.cancelAll(errShutdown)
		// Handlers that ended wait to report while the outbox is full:
		// where the completer cannot write (the database is gone), stop
		// recording, and their steps stay to be reclaimed.
		select {
		case <-drained:
		case <-time.After(stopGrace):
			e.completer.giveUp()
			abandoned = e.abandonHandlers(drained)
		}
	}
	e.completer.close()
	select {
	case <-e.completer.done:
	case <-ctx.Done():
		// Give the last outcomes a moment, then stop retrying them: the
		// database may be unreachable, and Stop must not hang on it.
		select {
		case <-e.completer.done:
		case <-time.After(stopGrace):
			e.completer.giveUp()
			<-e.completer.done
		}
	}
	// Every handler returned: end the watchdog of exec steps' commands.
	e.execGuard.Close()
	// Every outcome is recorded (or given up on): only now may the
	// engine's lease lapse.
	e.cancelBeat()
	e.beating.Wait()
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err := e.store.StopEngine(stopCtx, e.ID())
	e.log.Info("engine stopped", "engine_id", e.ID())
	return errors.Join(abandoned, err)
}

// abandonHandlers waits a last stopGrace for the handlers that were
// cancelled to return, then leaves those that did not: a handler that
// ignores its context's cancellation must not hold the process up
// forever. Their steps stay under this engine, which Stop marks stopped,
// so another engine reclaims and reruns them; whatever such a handler
// returns later is not recorded (the completer is closed). The error
// names them.
func (e *Engine) abandonHandlers(drained <-chan struct{}) error {
	select {
	case <-drained:
		return nil
	case <-time.After(stopGrace):
	}
	left := e.exec.running()
	if len(left) == 0 {
		// Every handler returned: what is left is the engine's own
		// reporting, which no longer waits for the database (the
		// completer gave up). It ends soon; a bound keeps Stop from
		// hanging if it does not.
		select {
		case <-drained:
		case <-time.After(reportGrace):
			e.log.Warn("handlers returned, but their reports did not end", "engine_id", e.ID())
		}
		return nil
	}
	for _, c := range left {
		e.log.Error("handler ignored its cancellation: left running, its step is reclaimed by another engine",
			"engine_id", e.ID(), "task_id", c.TaskID, "step", c.Name, "attempt", c.Attempts)
	}
	return fmt.Errorf("%w: %d handler(s) did not return after their context was cancelled; their steps are reclaimed by another engine", ErrHandlersAbandoned, len(left))
}

// reportGrace bounds how long Stop waits for the reports of handlers that
// all returned, once it gave up recording.
const reportGrace = 10 * time.Second

// ErrHandlersAbandoned is what Stop returns when handlers still ran after
// their context was cancelled and a grace period passed: Stop returned
// without them, and their steps are run again elsewhere.
var ErrHandlersAbandoned = errors.New("handlers abandoned")

// stopGrace is how long Stop, past its deadline, still lets the completer
// record what handlers reported before it stops retrying.
const stopGrace = 2 * time.Second

// RunTask starts the engine restricted to one task, runs that task to its
// end and stops the engine. It is what "weft run" does: other work in the
// database is left to other engines. If ctx ends first, the engine stops
// gracefully and the task stays in the database to be resumed.
func (e *Engine) RunTask(ctx context.Context, id int64) (*store.Task, error) {
	e.mu.Lock()
	started := e.started
	e.mu.Unlock()
	if started {
		return nil, errors.New("RunTask needs an engine that is not started")
	}
	if len(e.cfg.Namespaces) > 0 {
		t, err := e.store.GetTask(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("run task %d: %w", id, err)
		}
		if !slices.Contains(e.cfg.Namespaces, t.Namespace) {
			return nil, fmt.Errorf("%w: run task %d: its namespace %q is not among the engine's Namespaces %q, so the engine would never claim it",
				store.ErrInvalid, id, t.Namespace, e.cfg.Namespaces)
		}
	}
	e.onlyTask = id
	if err := e.Start(ctx); err != nil {
		return nil, err
	}
	task, err := e.Wait(ctx, id)
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.ShutdownTimeout)
	defer cancel()
	return task, errors.Join(err, e.Stop(stopCtx))
}

// isDraining reports whether Stop has begun.
func (e *Engine) isDraining() bool {
	select {
	case <-e.draining:
		return true
	default:
		return false
	}
}
