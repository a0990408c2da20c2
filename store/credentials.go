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

// Session is a signed-in browser's session. Its ID is the SHA-256 of the
// cookie's secret, so the store never holds a value that signs anyone in.
type Session struct {
	ID        string
	KeyID     string
	CreatedAt time.Time
	ExpiresAt time.Time
	// Key is the key the session stands for (GetSession).
	Key *APIKey
}
