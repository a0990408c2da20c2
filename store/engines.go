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
}
