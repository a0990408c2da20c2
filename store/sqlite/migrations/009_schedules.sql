-- Cron schedules of registered workflows. The engine reads the cron
-- expression; the store keeps the next tick due, which firing moves with a
-- compare-and-swap so that a tick is fired once across every engine.
CREATE TABLE IF NOT EXISTS schedules (
	namespace    TEXT NOT NULL,
	workflow     TEXT NOT NULL,
	name         TEXT NOT NULL,
	version      TEXT NOT NULL, -- the workflow version the schedule submits
	cron         TEXT NOT NULL,
	time_zone    TEXT NOT NULL DEFAULT '',
	input        TEXT NOT NULL,
	catch_up     TEXT NOT NULL, -- skip, latest, all
	max_catch_up INTEGER NOT NULL,
	paused       INTEGER NOT NULL DEFAULT 0,
	last_tick    INTEGER,
	next_tick    INTEGER NOT NULL,
	created_at   INTEGER NOT NULL,
	updated_at   INTEGER NOT NULL,
	PRIMARY KEY (namespace, workflow, name)
);
CREATE INDEX IF NOT EXISTS schedules_due ON schedules (next_tick) WHERE paused = 0;
-- Pauses and resumptions of schedules, with who and why.
CREATE TABLE IF NOT EXISTS schedule_audit (
	id        INTEGER PRIMARY KEY,
	namespace TEXT NOT NULL,
	workflow  TEXT NOT NULL,
	name      TEXT NOT NULL,
	at        INTEGER NOT NULL,
	action    TEXT NOT NULL,
	actor     TEXT NOT NULL DEFAULT '',
	reason    TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS schedule_audit_key ON schedule_audit (namespace, workflow, name, id);
-- A task submitted by a schedule names it and its tick.
ALTER TABLE tasks ADD COLUMN schedule TEXT NOT NULL DEFAULT '';
ALTER TABLE tasks ADD COLUMN schedule_tick INTEGER;
-- Sub-workflows: a child task names its parent task and step and its depth
-- below the root; a step of type workflow records the child it waits for
-- and, once that child did not complete, why.
ALTER TABLE tasks ADD COLUMN parent_task_id INTEGER;
ALTER TABLE tasks ADD COLUMN parent_step_id INTEGER;
ALTER TABLE tasks ADD COLUMN depth INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN root_task_id INTEGER; -- the task at the top of a child's tree (weft run claims the tree's steps)
CREATE INDEX IF NOT EXISTS tasks_parent ON tasks (parent_task_id, id) WHERE parent_task_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS tasks_root ON tasks (root_task_id) WHERE root_task_id IS NOT NULL;
ALTER TABLE steps ADD COLUMN child_task_id INTEGER;
ALTER TABLE steps ADD COLUMN child_error TEXT;
