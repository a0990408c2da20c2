package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/client"
	"github.com/weftrun/weft/internal/taskview"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/weftdb"
	"github.com/weftrun/weft/wire"
)

// runRemote is `weft run --server`: register the template and submit the
// task through the server, then follow the task's events, redrawing its
// progress from the task as the server has it.
func (a *app) runRemote(ctx context.Context, path string, sub weft.Submission, jsonOut bool) error {
	w, err := a.loadTemplate(path)
	if err != nil {
		return err
	}
	b, err := a.backend(ctx, existingDB)
	if err != nil {
		return err
	}
	defer b.Close()
	if err := b.RegisterTemplate(ctx, path, w); err != nil {
		return err
	}
	sub.Workflow = w.Ref()
	res, err := b.Submit(ctx, sub)
	if err != nil {
		if errors.Is(err, weft.ErrInvalid) {
			return err // action says which flag
		}
		return fmt.Errorf("submit through %s: %w", b.Where(), err)
	}
	id := res.Task.ID
	if res.Duplicate {
		a.notice(slog.LevelInfo, fmt.Sprintf("task %d already exists with this idempotency key (%s); following it", id, res.Task.State), "task_id", id)
	}
	out := a.stdout
	if jsonOut {
		out = a.progressErr()
	}
	width, height, live := terminal(out)
	live = live && a.getenv("TERM") != "dumb"
	p := taskview.New(out, taskview.Options{Live: live, Color: live && a.getenv("NO_COLOR") == "", Width: width, Height: height, Server: a.serverFlag})
	if _, _, tty := terminal(a.stderr); live && tty {
		a.logOut.hold()
		defer a.logOut.release()
	}

	// Events mark the task changed; the loop below redraws it at most every
	// refresh. The stream starts at the oldest event kept of this task, so
	// nothing between the submission and the connection is lost.
	var (
		mu      sync.Mutex
		changed = true
		ended   bool
	)
	wake := make(chan struct{}, 1)
	followCtx, stopFollowing := context.WithCancel(ctx)
	defer stopFollowing()
	followed := make(chan error, 1)
	go func() {
		followed <- a.followEvents(followCtx, client.EventFilter{TaskID: id, After: "start"}, func(wire.Event) error {
			mu.Lock()
			changed = true
			mu.Unlock()
			select {
			case wake <- struct{}{}:
			default:
			}
			return nil
		})
	}()
	bg := context.WithoutCancel(ctx)
	tick := time.NewTicker(a.refresh)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			a.notice(slog.LevelWarn, fmt.Sprintf("interrupted; task %d goes on on %s (follow it with 'weft events --task %d')", id, weftdb.Redact(b.Where()), id), "task_id", id)
			return exitWith(exitInterrupted)
		case err := <-followed:
			if errors.Is(err, errTaskEnded) {
				ended = true
				break
			}
			if ctx.Err() == nil {
				return fmt.Errorf("follow task %d: %w", id, err)
			}
		case <-wake:
		case <-tick.C:
		}
		mu.Lock()
		redraw := changed
		changed = false
		mu.Unlock()
		if !redraw && !ended {
			continue
		}
		t, err := b.Get(bg, id)
		if err != nil {
			a.log.Warn("read task", "task_id", id, "error", err)
			continue
		}
		if !t.State.Terminal() {
			if err := p.Update(t); err != nil {
				a.log.Debug("render progress", "error", err)
			}
			continue
		}
		if err := p.Finish(t); err != nil {
			a.log.Debug("render progress", "error", err)
		}
		if jsonOut {
			if err := writeJSON(a.stdout, t); err != nil {
				return err
			}
		}
		if t.State != state.TaskCompleted {
			return exitWith(exitFailed)
		}
		return nil
	}
}
