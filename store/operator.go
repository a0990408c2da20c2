package store

import (
	"encoding/json"
	"time"

	"github.com/weftrun/weft/state"
)

// APIKey is a credential of the REST API. The secret itself is never
// stored: Hash is its SHA-256.
type APIKey struct {
	ID          string     `json:"id"`
	Name        string     `json:"name"`
	Hash        []byte     `json:"-"`
	Permissions []string   `json:"permissions"`
	CreatedAt   time.Time  `json:"created_at"`
	RevokedAt   *time.Time `json:"revoked_at,omitempty"`
}

// StepResolution is an operator's decision to end a step by hand.
type StepResolution struct {
	StepID int64
	// Result, if set, is the step's result as its dependents see it.
	Result   json.RawMessage
	EngineID string
	Reason   string
}

// QueueCount is how many unfinished steps of a namespace are in one state.
type QueueCount struct {
	Namespace string     `json:"namespace"`
	State     state.Step `json:"state"`
	Count     int        `json:"count"`
}
