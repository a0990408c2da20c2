// Package admin holds the operations an operator (the CLI, the REST API,
// the dashboard) runs on what an engine's database holds: reading and
// listing tasks and steps, cancelling, retrying and deleting them one by
// one or in bulk, and managing policies, breakers, schedules and
// retentions. Each validates what it is given, names what does not exist,
// and records who acted.
package admin

import (
	"log/slog"
	"time"

	"github.com/weftrun/weft/store"
)

// Admin runs the operator's operations on one engine's store.
type Admin struct {
	store store.Store
	log   *slog.Logger
	// id is the engine's id, recorded as the actor where none is given.
	id func() string
	// cancelRunning stops the handlers this engine runs for steps that
	// were cancelled.
	cancelRunning func(running []store.Fence)
	// clock is the time schedules are planned by.
	clock func() time.Time
	// staleAfter is the attention threshold for ready steps nobody serves.
	staleAfter time.Duration
}

// New returns the operations of the engine whose id is id, on s.
func New(s store.Store, log *slog.Logger, id func() string, cancelRunning func([]store.Fence), clock func() time.Time, staleAfter time.Duration) *Admin {
	return &Admin{store: s, log: log, id: id, cancelRunning: cancelRunning, clock: clock, staleAfter: staleAfter}
}
