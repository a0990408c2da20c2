package store

import "time"

// SHIM-REMOVE-AT-MERGE: types of the store operations being added on h-store.

type HeartbeatParams struct {
	EngineID      string
	Now           time.Time
	Held          []Fence
	Complete      bool
	ClaimedBefore time.Time
}

type HeartbeatResult struct {
	Lost     []Fence
	Released int
}
