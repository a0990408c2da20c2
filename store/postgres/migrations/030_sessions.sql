-- The dashboard's browser sessions. A session stands for one API key; its
-- id is the hex SHA-256 of the cookie's secret. Signing out deletes the row,
-- and revoking the key deletes its sessions.
CREATE TABLE IF NOT EXISTS sessions (
	id         TEXT PRIMARY KEY,
	key_id     TEXT NOT NULL REFERENCES api_keys (id),
	created_at BIGINT NOT NULL,
	expires_at BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS sessions_key ON sessions (key_id);
CREATE INDEX IF NOT EXISTS sessions_expires ON sessions (expires_at);
