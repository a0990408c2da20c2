-- One row per elected role: the engine that holds it and until when.
-- Maintenance (reaping, expiry, promotion of due steps) runs on the holder
-- of 'maintenance'.
CREATE TABLE IF NOT EXISTS leaders (
	role       TEXT PRIMARY KEY,
	engine_id  TEXT NOT NULL,
	expires_at BIGINT NOT NULL
);
