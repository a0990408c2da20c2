package store

import "time"

// APIKey is a credential of the REST API. The secret itself is never
// stored: Hash is its SHA-256.
type APIKey struct {
	ID          string
	Name        string
	Hash        []byte
	Permissions []string
	CreatedAt   time.Time
	RevokedAt   *time.Time
}
