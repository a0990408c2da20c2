-- The history (GET /v1/events) is the audit log read in id order: one
-- writer at a time means ids are handed out in commit order. AUTOINCREMENT
-- keeps an id from being handed out twice when the newest rows are deleted
-- (a pruned or deleted task), so a reader that resumes after an id never
-- skips a row written later.
CREATE TABLE audit_history (
	id         INTEGER PRIMARY KEY AUTOINCREMENT,
	task_id    INTEGER NOT NULL,
	step       TEXT NOT NULL DEFAULT '',
	from_state TEXT NOT NULL,
	to_state   TEXT NOT NULL,
	at         INTEGER NOT NULL,
	attempt    INTEGER NOT NULL DEFAULT 0,
	engine_id  TEXT NOT NULL DEFAULT '',
	reason     TEXT NOT NULL DEFAULT ''
);
INSERT INTO audit_history (id, task_id, step, from_state, to_state, at, attempt, engine_id, reason)
	SELECT id, task_id, step, from_state, to_state, at, attempt, engine_id, reason FROM audit;
DROP TABLE audit;
ALTER TABLE audit_history RENAME TO audit;
CREATE INDEX IF NOT EXISTS audit_task ON audit (task_id, id);
