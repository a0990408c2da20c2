package store

import "time"

// EngineInfo describes a live engine process.
type EngineInfo struct {
	ID          string
	Host        string
	PID         int
	StartedAt   time.Time
	HeartbeatAt time.Time
	// Leader reports that the engine holds the maintenance lease.
	Leader bool
	// Worker marks a remote worker (recorded as an engine of its own), as
	// opposed to an engine process.
	Worker bool
	// Owner is, for a remote worker, the principal whose credential
	// registered it; only that principal may use or stop it. Empty for an
	// engine, and for a worker registered before owners were recorded.
	Owner string
	// Handlers are the handlers the engine or worker serves ("*": any);
	// Held is how many steps it runs. ListWorkers fills them.
	Handlers []string
	Held     int
}

// HeartbeatParams is one heartbeat of an engine or of a remote worker (which
// holds steps under an engine id of its own).
type HeartbeatParams struct {
	EngineID string
	// Now is the time of the heartbeat; zero means the store's clock.
	Now time.Time
	// Held are the fences of the steps the holder runs; those no longer
	// valid come back in Lost.
	Held []Fence
	// Complete says Held lists every step the holder has. Steps running
	// under EngineID whose fence is not listed and that were claimed
	// before ClaimedBefore are released to ready with their attempt given
	// back (the holder never received them: a claim whose reply was lost),
	// each with an audit row (reason "released: not held by its worker").
	// ClaimedBefore keeps a claim whose reply is still on its way to the
	// holder from being released; zero releases nothing.
	Complete      bool
	ClaimedBefore time.Time
}

// HeartbeatResult is what a heartbeat found.
type HeartbeatResult struct {
	// Lost are the listed fences that are no longer valid (cancelled or
	// taken over): their handlers must stop.
	Lost []Fence
	// Released counts the unlisted steps released (Complete only).
	Released int
}
