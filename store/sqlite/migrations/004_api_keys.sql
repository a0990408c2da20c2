-- API keys of the HTTP server: only a hash of each secret is stored.
CREATE TABLE IF NOT EXISTS api_keys (
	id          TEXT PRIMARY KEY,
	name        TEXT NOT NULL,
	hash        TEXT NOT NULL, -- hex SHA-256 of the secret
	permissions TEXT NOT NULL, -- comma-separated resource:action
	created_at  INTEGER NOT NULL,
	revoked_at  INTEGER
);
