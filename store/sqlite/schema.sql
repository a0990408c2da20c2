-- weft schema for SQLite. Times are integer microseconds since the Unix epoch.
CREATE TABLE IF NOT EXISTS weft_schema (version INTEGER NOT NULL);

CREATE TABLE IF NOT EXISTS workflows (
	namespace  TEXT NOT NULL,
	name       TEXT NOT NULL,
	version    TEXT NOT NULL,
	definition TEXT NOT NULL,
	created_at INTEGER NOT NULL,
	PRIMARY KEY (namespace, name, version)
);

CREATE TABLE IF NOT EXISTS tasks (
	id              INTEGER PRIMARY KEY,
	namespace       TEXT NOT NULL,
	workflow        TEXT NOT NULL,
	version         TEXT NOT NULL,
	state           TEXT NOT NULL,
	input           TEXT NOT NULL,
	priority        INTEGER NOT NULL,
	idempotency_key TEXT,
	run_at          INTEGER NOT NULL,
	good_until      INTEGER,
	created_at      INTEGER NOT NULL,
	started_at      INTEGER,
	finished_at     INTEGER,
	remaining       INTEGER NOT NULL, -- steps not yet terminal
	failed          INTEGER NOT NULL DEFAULT 0, -- steps failed or expired
	error           TEXT NOT NULL DEFAULT ''
);
CREATE UNIQUE INDEX IF NOT EXISTS tasks_idempotency ON tasks (namespace, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS tasks_good_until ON tasks (good_until) WHERE state = 'pending' AND good_until IS NOT NULL;
CREATE INDEX IF NOT EXISTS tasks_state ON tasks (state, id);

CREATE TABLE IF NOT EXISTS steps (
	id           INTEGER PRIMARY KEY,
	task_id      INTEGER NOT NULL,
	idx          INTEGER NOT NULL,
	name         TEXT NOT NULL,
	handler      TEXT NOT NULL,
	namespace    TEXT NOT NULL,
	state        TEXT NOT NULL,
	sub          TEXT NOT NULL DEFAULT '',
	deps         TEXT NOT NULL DEFAULT '', -- comma-separated indexes of dependencies
	children     TEXT NOT NULL DEFAULT '', -- comma-separated indexes of dependents
	deps_ok      INTEGER NOT NULL DEFAULT 0,
	deps_failed  INTEGER NOT NULL DEFAULT 0,
	deps_skipped INTEGER NOT NULL DEFAULT 0,
	priority     INTEGER NOT NULL,
	sort_key     INTEGER NOT NULL DEFAULT 0, -- ready time minus priority times the aging interval
	attempt      INTEGER NOT NULL DEFAULT 0,
	max_attempts INTEGER NOT NULL,
	ttl          INTEGER NOT NULL DEFAULT 0,
	expires_at   INTEGER,
	run_at       INTEGER,
	lease_id     INTEGER NOT NULL DEFAULT 0,
	engine_id    TEXT NOT NULL DEFAULT '',
	result       TEXT,
	error        TEXT NOT NULL DEFAULT '',
	checkpoint   TEXT,
	started_at   INTEGER,
	finished_at  INTEGER
);
CREATE UNIQUE INDEX IF NOT EXISTS steps_task ON steps (task_id, idx);
CREATE INDEX IF NOT EXISTS steps_ready ON steps (sort_key) WHERE state = 'ready';
CREATE INDEX IF NOT EXISTS steps_waiting ON steps (run_at) WHERE state = 'waiting';
CREATE INDEX IF NOT EXISTS steps_expiry ON steps (expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS steps_running ON steps (namespace, engine_id) WHERE state = 'running';

CREATE TABLE IF NOT EXISTS audit (
	id         INTEGER PRIMARY KEY,
	task_id    INTEGER NOT NULL,
	step       TEXT NOT NULL DEFAULT '',
	from_state TEXT NOT NULL,
	to_state   TEXT NOT NULL,
	at         INTEGER NOT NULL,
	attempt    INTEGER NOT NULL DEFAULT 0,
	engine_id  TEXT NOT NULL DEFAULT '',
	reason     TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS audit_task ON audit (task_id, id);

CREATE TABLE IF NOT EXISTS engines (
	id           TEXT PRIMARY KEY,
	host         TEXT NOT NULL,
	pid          INTEGER NOT NULL,
	started_at   INTEGER NOT NULL,
	heartbeat_at INTEGER NOT NULL,
	state        TEXT NOT NULL -- live, stopped, dead
);

-- server
CREATE TABLE IF NOT EXISTS api_keys (
	id          TEXT PRIMARY KEY,
	name        TEXT NOT NULL,
	hash        TEXT NOT NULL, -- hex SHA-256 of the secret
	permissions TEXT NOT NULL, -- comma-separated resource:action
	created_at  INTEGER NOT NULL,
	revoked_at  INTEGER
);
