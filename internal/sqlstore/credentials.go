package sqlstore

import (
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/weftrun/weft/internal/sqlstore/sqldb"
	"github.com/weftrun/weft/internal/sqlstore/sqltx"
	"github.com/weftrun/weft/internal/sqlstore/transition"
	"github.com/weftrun/weft/store"
)

// This file holds the API keys of the REST API.

// CreateAPIKey records a new API key.
func (s *admin) CreateAPIKey(ctx context.Context, k store.APIKey) error {
	if k.ID == "" || len(k.Hash) == 0 {
		return errors.New("api key needs an id and a hash")
	}
	return s.write(ctx, "", func(t *transition.Tx) error {
		created := k.CreatedAt
		if created.IsZero() {
			created = time.UnixMicro(t.Now)
		}
		res, err := t.Exec(`INSERT INTO api_keys (id, name, hash, permissions, created_at) VALUES (?, ?, ?, ?, ?)
			ON CONFLICT (id) DO NOTHING`,
			k.ID, k.Name, hex.EncodeToString(k.Hash), strings.Join(k.Permissions, " "), created.UnixMicro())
		if err != nil {
			return fmt.Errorf("insert api key %s: %w", k.ID, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return store.Conflictf("api key %s exists", k.ID)
		}
		return nil
	})
}

// GetAPIKey returns a key by id.
func (s *admin) GetAPIKey(ctx context.Context, id string) (*store.APIKey, error) {
	k, err := sqltx.ScanAPIKey(s.ReadRow(ctx, `SELECT `+sqltx.APIKeyColumns+` FROM api_keys WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("api key %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get api key %s: %w", id, err)
	}
	return &k, nil
}

// ListAPIKeys returns every key, oldest first.
func (s *admin) ListAPIKeys(ctx context.Context) ([]store.APIKey, error) {
	rows, err := s.Read(ctx, `SELECT `+sqltx.APIKeyColumns+` FROM api_keys ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("list api keys: %w", err)
	}
	keys, err := sqldb.Collect(rows, sqltx.ScanAPIKey)
	if err != nil {
		return nil, fmt.Errorf("list api keys: %w", err)
	}
	return keys, nil
}

// RevokeAPIKey marks a key revoked.
func (s *admin) RevokeAPIKey(ctx context.Context, id string) error {
	return s.write(ctx, "", func(t *transition.Tx) error {
		var n int
		if err := t.QueryRow(`SELECT count(*) FROM api_keys WHERE id = ?`, id).Scan(&n); err != nil {
			return fmt.Errorf("look up api key %s: %w", id, err)
		}
		if n == 0 {
			return fmt.Errorf("api key %s: %w", id, store.ErrNotFound)
		}
		if _, err := t.Exec(`UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL`, t.Now, id); err != nil {
			return fmt.Errorf("revoke api key %s: %w", id, err)
		}
		if _, err := t.Exec(`DELETE FROM sessions WHERE key_id = ?`, id); err != nil {
			return fmt.Errorf("end the sessions of api key %s: %w", id, err)
		}
		return nil
	})
}

// CreateSession records a browser session of a live key and drops the
// expired ones.
func (s *admin) CreateSession(ctx context.Context, ses store.Session) error {
	if ses.ID == "" || ses.KeyID == "" || ses.ExpiresAt.IsZero() {
		return errors.New("session needs an id, a key and an expiry")
	}
	return s.write(ctx, "", func(t *transition.Tx) error {
		var n int
		if err := t.QueryRow(`SELECT count(*) FROM api_keys WHERE id = ? AND revoked_at IS NULL`, ses.KeyID).Scan(&n); err != nil {
			return fmt.Errorf("look up api key %s: %w", ses.KeyID, err)
		}
		if n == 0 {
			return fmt.Errorf("api key %s: %w", ses.KeyID, store.ErrNotFound)
		}
		if _, err := t.Exec(`DELETE FROM sessions WHERE expires_at <= ?`, t.Now); err != nil {
			return fmt.Errorf("delete expired sessions: %w", err)
		}
		created := ses.CreatedAt
		if created.IsZero() {
			created = time.UnixMicro(t.Now)
		}
		res, err := t.Exec(`INSERT INTO sessions (id, key_id, created_at, expires_at) VALUES (?, ?, ?, ?)
			ON CONFLICT (id) DO NOTHING`, ses.ID, ses.KeyID, created.UnixMicro(), ses.ExpiresAt.UnixMicro())
		if err != nil {
			return fmt.Errorf("insert session: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return store.Conflictf("session exists")
		}
		return nil
	})
}

// GetSession returns a session that has not expired, with its key, in one
// read: every request of a signed-in browser makes it.
func (s *admin) GetSession(ctx context.Context, id string) (*store.Session, error) {
	var created, expires int64
	k, err := sqltx.ScanAPIKey(withDest{s.ReadRow(ctx, `SELECT `+sqltx.Qualify("k", sqltx.APIKeyColumns)+`, s.created_at, s.expires_at
		FROM sessions s JOIN api_keys k ON k.id = s.key_id WHERE s.id = ? AND s.expires_at > ?`, id, s.Clock().UnixMicro()), []any{&created, &expires}})
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("session: %w", store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get session: %w", err)
	}
	return &store.Session{ID: id, KeyID: k.ID, CreatedAt: time.UnixMicro(created), ExpiresAt: time.UnixMicro(expires), Key: &k}, nil
}

// DeleteSession ends a session.
func (s *admin) DeleteSession(ctx context.Context, id string) error {
	return s.write(ctx, "", func(t *transition.Tx) error {
		if _, err := t.Exec(`DELETE FROM sessions WHERE id = ?`, id); err != nil {
			return fmt.Errorf("delete session: %w", err)
		}
		return nil
	})
}
