-- Circuit breakers: after a number of consecutive failed attempts of one
-- step of a workflow (across its tasks and versions), the claims of that
-- step are held for a cooldown, then one probe decides whether it closes.
--
-- breakers: one row per breaker_key ('namespace/workflow/step') that has
-- failed at least once. failures counts the consecutive failed attempts
-- (a success resets it); threshold and cooldown (microseconds) are those
-- of the step that last failed. state is 'closed', 'open' (held until
-- opened_at + cooldown) or 'half-open' (probe_step_id runs as the probe,
-- claimed at probe_at).
CREATE TABLE IF NOT EXISTS breakers (
	breaker_key   TEXT PRIMARY KEY,
	state         TEXT NOT NULL DEFAULT 'closed',
	failures      INTEGER NOT NULL DEFAULT 0,
	threshold     INTEGER NOT NULL,
	cooldown      INTEGER NOT NULL,
	opened_at     INTEGER,
	probe_at      INTEGER,
	probe_step_id INTEGER,
	updated_at    INTEGER NOT NULL
);
-- Steps carry their breaker ('' = none) and its thresholds, filled at
-- submit like limit_key, so that recording an outcome needs no lookup.
ALTER TABLE steps ADD COLUMN breaker_key TEXT NOT NULL DEFAULT '';
ALTER TABLE steps ADD COLUMN breaker_n INTEGER NOT NULL DEFAULT 0;
ALTER TABLE steps ADD COLUMN breaker_cooldown INTEGER NOT NULL DEFAULT 0;
