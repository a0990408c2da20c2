package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/weftrun/weft/internal/textsafe"
	"github.com/weftrun/weft/store"
)

// Handler runs one attempt of a step in this process. Its result is encoded
// as JSON; an error fails the attempt (see outcome.go for what each kind of
// error means).
type Handler func(ctx context.Context, r *Run) (any, error)

// Run is one attempt of a step as the engine runs it in this process: what
// the handler sees, and the fenced writes it may make while it runs.
type Run struct {
	TaskID   int64
	Workflow string // namespace/name@version
	Step     string
	// Number is 1 for the first attempt.
	Number     int
	Input      json.RawMessage
	Deps       map[string]json.RawMessage
	Config     json.RawMessage
	Checkpoint json.RawMessage
	Batch      json.RawMessage
	// Deadline is when the step's timeout passes; zero when it has none.
	Deadline time.Time

	engine  *Engine
	log     *stepLog
	fence   store.Fence
	claimed *store.ClaimedStep
	mu      sync.Mutex
	slot    bool // holds a slot
}

// SaveCheckpoint stores a JSON checkpoint for later attempts of the step
// (fenced: it fails with an error wrapping store.ErrStaleLease if the step
// was taken over).
func (r *Run) SaveCheckpoint(ctx context.Context, cp json.RawMessage) error {
	if err := r.engine.checkpoint(ctx, r.fence, cp); err != nil {
		return fmt.Errorf("save checkpoint of step %q: %w", r.Step, err)
	}
	r.Checkpoint = cp
	return nil
}

// Progress records how far the handler got (fenced like SaveCheckpoint).
func (r *Run) Progress(ctx context.Context, fraction float64, message string) error {
	if err := r.engine.progress(ctx, r.fence, fraction, message); err != nil {
		return fmt.Errorf("save progress of step %q: %w", r.Step, err)
	}
	return nil
}

// DeferUntil waits until cond reports true, checking it every interval,
// with the handler's slot released: other steps run on this engine
// meanwhile, and the step shows the sub-status "deferred". It re-acquires a
// slot before returning. It returns early with an error if cond fails or ctx
// ends.
func (r *Run) DeferUntil(ctx context.Context, cond func(context.Context) (bool, error), interval time.Duration) error {
	if interval <= 0 {
		return errors.New("DeferUntil interval must be positive")
	}
	if ok, err := cond(ctx); err != nil || ok {
		return err
	}
	e := r.engine
	if err := e.store.SetDeferred(ctx, r.fence, e.ID(), true); err != nil {
		return fmt.Errorf("defer step %q: %w", r.Step, err)
	}
	r.releaseSlot()
	r.log.Debug("step deferred")
	waitErr := func() error {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-t.C:
			}
			ok, err := cond(ctx)
			if err != nil {
				return err
			}
			if ok {
				return nil
			}
		}
	}()
	if err := e.exec.slots.Take(ctx); err != nil {
		return errors.Join(waitErr, context.Cause(ctx))
	}
	r.mu.Lock()
	r.slot = true
	r.mu.Unlock()
	if waitErr != nil {
		return waitErr
	}
	if err := e.store.SetDeferred(ctx, r.fence, e.ID(), false); err != nil {
		return fmt.Errorf("resume step %q: %w", r.Step, err)
	}
	return nil
}

func (r *Run) releaseSlot() {
	r.mu.Lock()
	held := r.slot
	r.slot = false
	r.mu.Unlock()
	if held {
		r.engine.exec.slots.Release()
	}
}

// maxProgressMessage bounds a progress message, in bytes.
const maxProgressMessage = 4096

// checkpoint saves a running step's checkpoint, for a handler of this
// engine or a remote worker alike.
func (e *Engine) checkpoint(ctx context.Context, f store.Fence, cp json.RawMessage) error {
	if len(cp) == 0 || !json.Valid(cp) {
		return fmt.Errorf("%w checkpoint: not valid JSON", store.ErrInvalid)
	}
	if path, err := textsafe.Find(cp); err != nil {
		return fmt.Errorf("%w %s: %w", store.ErrInvalid, textsafe.Join("checkpoint", path), err)
	}
	return e.store.SaveCheckpoint(ctx, f, cp)
}

// progress saves a running step's progress, for a handler of this engine
// or a remote worker alike.
func (e *Engine) progress(ctx context.Context, f store.Fence, fraction float64, message string) error {
	if math.IsNaN(fraction) || fraction < 0 || fraction > 1 {
		return fmt.Errorf("%w progress: fraction must be from 0 to 1, got %v", store.ErrInvalid, fraction)
	}
	if len(message) > maxProgressMessage {
		return fmt.Errorf("%w progress: message is %d bytes, more than %d", store.ErrInvalid, len(message), maxProgressMessage)
	}
	return e.store.SaveProgress(ctx, f, fraction, textsafe.String(message))
}
