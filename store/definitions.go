package store

import (
	"encoding/json"
	"time"
)

// WorkflowRecord is a registered workflow version.
type WorkflowRecord struct {
	Namespace  string
	Name       string
	Version    string
	Definition json.RawMessage // the workflow as JSON
	CreatedAt  time.Time
}
