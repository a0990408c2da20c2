package engine

import (
	"context"
	"os"
	"time"

	"github.com/weftrun/weft/store"
)

// This file holds the engine's registration: the handlers it advertises.

// engineInfo is this engine's registration, with the handlers it serves.
func (x *executor) engineInfo(id string) store.EngineInfo {
	x.mu.Lock()
	names := x.names
	x.namesChanged = false
	x.mu.Unlock()
	return store.EngineInfo{ID: id, Host: x.e.host, PID: os.Getpid(), StartedAt: time.Now(), Handlers: advertised(names)}
}

// advertised is what an engine serving names advertises: "*" when it
// claims any handler (no names registered restricts nothing).
func advertised(names []string) []string {
	if len(names) == 0 {
		return []string{"*"}
	}
	return names
}

// advertise records the handlers registered since the engine last
// advertised them.
func (x *executor) advertise(ctx context.Context, id string) {
	x.mu.Lock()
	changed, names := x.namesChanged, x.names
	x.namesChanged = false
	x.mu.Unlock()
	if !changed {
		return
	}
	if err := x.e.store.SetHandlers(ctx, id, advertised(names)); err != nil {
		x.mu.Lock()
		x.namesChanged = true // try again at the next heartbeat
		x.mu.Unlock()
		x.e.log.Warn("advertise handlers", "engine_id", id, "error", err)
	}
}
