-- Scheduling policies held in the database, so that they hold across every
-- engine and remote worker and change at run time.
--
-- policies: one row per target an operator set something on: '*' (all
-- work), a namespace ('shop') or a workflow ('shop/checkout'). paused stops
-- claims of the target's steps; concurrency (namespaces only; 0 = none)
-- bounds how many of its steps run at once.
CREATE TABLE IF NOT EXISTS policies (
	target      TEXT PRIMARY KEY,
	paused      INTEGER NOT NULL DEFAULT 0,
	concurrency INTEGER NOT NULL DEFAULT 0,
	updated_at  INTEGER NOT NULL,
	updated_by  TEXT NOT NULL DEFAULT ''
);
-- policy_version counts changes of policies: a claim reads it (one row) and
-- reloads the policies only when it moved, so that policies cost nothing
-- while they do not change.
CREATE TABLE IF NOT EXISTS policy_version (
	id      INTEGER PRIMARY KEY CHECK (id = 1),
	version INTEGER NOT NULL
);
INSERT INTO policy_version (id, version) VALUES (1, 0) ON CONFLICT (id) DO NOTHING;
-- policy_changes is the audit of policies: who changed what, when, why.
CREATE TABLE IF NOT EXISTS policy_changes (
	id     INTEGER PRIMARY KEY,
	at     INTEGER NOT NULL,
	actor  TEXT NOT NULL,
	target TEXT NOT NULL,
	change TEXT NOT NULL,
	reason TEXT NOT NULL DEFAULT ''
);

-- Steps carry what the claim needs to apply policies without a join: their
-- workflow (for a paused workflow) and their concurrency keys. limit_key is
-- the step's own limit ('' = none) with limit_n running at once;
-- task_limit_key/task_limit_n the workflow's limit of running tasks, which
-- the task row carries too (tasks.limit_key, limit_n) so that running tasks
-- can be counted: a step of a task that has not started takes a place.
ALTER TABLE steps ADD COLUMN workflow TEXT NOT NULL DEFAULT '';
ALTER TABLE steps ADD COLUMN limit_key TEXT NOT NULL DEFAULT '';
ALTER TABLE steps ADD COLUMN limit_n INTEGER NOT NULL DEFAULT 0;
ALTER TABLE steps ADD COLUMN task_limit_key TEXT NOT NULL DEFAULT '';
ALTER TABLE steps ADD COLUMN task_limit_n INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN limit_key TEXT NOT NULL DEFAULT '';
ALTER TABLE tasks ADD COLUMN limit_n INTEGER NOT NULL DEFAULT 0;
-- Unfinished steps of existing tasks get their workflow, so that pausing a
-- workflow holds for work submitted before this migration.
UPDATE steps SET workflow = (SELECT workflow FROM tasks WHERE tasks.id = steps.task_id)
	WHERE state IN ('pending', 'ready', 'waiting', 'running');
CREATE INDEX IF NOT EXISTS steps_limit_running ON steps (limit_key) WHERE state = 'running' AND limit_key != '';
CREATE INDEX IF NOT EXISTS tasks_limit_running ON tasks (limit_key) WHERE state = 'running' AND limit_key != '';
