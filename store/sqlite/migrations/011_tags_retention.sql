-- Operations: task tags, retention, the operator log and the handlers each
-- engine or remote worker serves.
--
-- tags holds a task's tags as a JSON object for reading; task_tags holds
-- them one row per tag so that a filter by tag is an index lookup.
ALTER TABLE tasks ADD COLUMN tags TEXT;
CREATE TABLE IF NOT EXISTS task_tags (
	task_id INTEGER NOT NULL,
	key     TEXT NOT NULL,
	value   TEXT NOT NULL,
	PRIMARY KEY (task_id, key)
);
CREATE INDEX IF NOT EXISTS task_tags_lookup ON task_tags (key, value, task_id);
-- Retention and prune select finished tasks by state and finishing time.
CREATE INDEX IF NOT EXISTS tasks_finished ON tasks (state, finished_at) WHERE finished_at IS NOT NULL;
-- Namespace-level retention set at run time: how long finished tasks of a
-- state are kept (microseconds).
CREATE TABLE IF NOT EXISTS retention (
	namespace  TEXT NOT NULL,
	state      TEXT NOT NULL,
	keep       INTEGER NOT NULL,
	updated_at INTEGER NOT NULL,
	updated_by TEXT NOT NULL DEFAULT '',
	PRIMARY KEY (namespace, state)
);
-- Operator actions whose subject leaves no audit trail of its own: the
-- deletion of a task, a change of retention.
CREATE TABLE IF NOT EXISTS operator_log (
	id      INTEGER PRIMARY KEY,
	at      INTEGER NOT NULL,
	actor   TEXT NOT NULL,
	action  TEXT NOT NULL,
	subject TEXT NOT NULL,
	reason  TEXT NOT NULL DEFAULT ''
);
-- The handlers an engine or remote worker serves ('*': any).
CREATE TABLE IF NOT EXISTS engine_handlers (
	engine_id TEXT NOT NULL,
	handler   TEXT NOT NULL,
	PRIMARY KEY (engine_id, handler)
);
CREATE INDEX IF NOT EXISTS engine_handlers_handler ON engine_handlers (handler, engine_id);
