package store

import "time"

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
