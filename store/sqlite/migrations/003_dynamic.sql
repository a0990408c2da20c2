-- Dynamic workflows: step kinds (decision, batch, item, signal), trigger
-- rules, batch items, signal waits and progress.
ALTER TABLE steps ADD COLUMN kind TEXT NOT NULL DEFAULT ''; -- '', decision, batch, item, signal
ALTER TABLE steps ADD COLUMN trigger_rule TEXT NOT NULL DEFAULT ''; -- '' means all_success
ALTER TABLE steps ADD COLUMN deps_extra INTEGER NOT NULL DEFAULT 0; -- dependencies beyond deps: the items of a batch dependency
ALTER TABLE steps ADD COLUMN batch_of INTEGER; -- for an item: the index of its batch step
ALTER TABLE steps ADD COLUMN template TEXT NOT NULL DEFAULT ''; -- for an item: the step template it runs
ALTER TABLE steps ADD COLUMN item TEXT; -- for an item: its batch item
ALTER TABLE steps ADD COLUMN signal TEXT NOT NULL DEFAULT ''; -- for a signal step: the signal it waits for
ALTER TABLE steps ADD COLUMN wait_timeout INTEGER NOT NULL DEFAULT 0; -- for a signal step: how long it waits
ALTER TABLE steps ADD COLUMN progress REAL;
ALTER TABLE steps ADD COLUMN progress_msg TEXT NOT NULL DEFAULT '';

CREATE TABLE IF NOT EXISTS signals (
	id         INTEGER PRIMARY KEY,
	task_id    INTEGER NOT NULL,
	name       TEXT NOT NULL,
	payload    TEXT NOT NULL,
	created_at INTEGER NOT NULL,
	step_id    INTEGER -- the step whose wait it completed; NULL while kept
);
CREATE INDEX IF NOT EXISTS signals_pending ON signals (task_id, name, id) WHERE step_id IS NULL;
CREATE INDEX IF NOT EXISTS steps_batch ON steps (task_id, batch_of, idx) WHERE batch_of IS NOT NULL;
CREATE INDEX IF NOT EXISTS steps_signal ON steps (task_id, signal, idx) WHERE state = 'waiting' AND signal != '';
