-- Ids are never handed out twice, whatever is deleted. A table whose key is
-- a plain INTEGER PRIMARY KEY gives the next row max(id) + 1, so deleting
-- the newest tasks (delete, prune, retention) gave their ids, and their
-- steps', to the next ones, and `weft cancel N`, a webhook payload or the
-- operator log could name another task than the one meant. AUTOINCREMENT
-- hands out ids above every id the table ever held. SQLite adds it only by
-- building the table anew: each table with ids that users see is copied,
-- rows and ids as they are, into its new definition, and its indexes are
-- made again. (audit and webhooks have it since 007 and 008.)

ALTER TABLE tasks RENAME TO tasks_old;
CREATE TABLE tasks (
	id              INTEGER PRIMARY KEY AUTOINCREMENT,
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
	error           TEXT NOT NULL DEFAULT '',
	schedule TEXT NOT NULL DEFAULT '',
	schedule_tick INTEGER,
	parent_task_id INTEGER,
	parent_step_id INTEGER,
	depth INTEGER NOT NULL DEFAULT 0,
	root_task_id INTEGER,
	limit_key TEXT NOT NULL DEFAULT '',
	limit_n INTEGER NOT NULL DEFAULT 0,
	tags TEXT,
	traceparent TEXT NOT NULL DEFAULT '',
	start_step BIGINT NOT NULL DEFAULT -1,
	start_lease BIGINT NOT NULL DEFAULT 0
);
INSERT INTO tasks (id, namespace, workflow, version, state, input, priority, idempotency_key, run_at, good_until, created_at, started_at, finished_at, remaining, failed, error, schedule, schedule_tick, parent_task_id, parent_step_id, depth, root_task_id, limit_key, limit_n, tags, traceparent, start_step, start_lease)
	SELECT id, namespace, workflow, version, state, input, priority, idempotency_key, run_at, good_until, created_at, started_at, finished_at, remaining, failed, error, schedule, schedule_tick, parent_task_id, parent_step_id, depth, root_task_id, limit_key, limit_n, tags, traceparent, start_step, start_lease FROM tasks_old;
DROP TABLE tasks_old;
CREATE INDEX tasks_activity ON tasks (finished_at, namespace, state, started_at, run_at) WHERE finished_at IS NOT NULL;
CREATE INDEX tasks_good_until ON tasks (good_until) WHERE state = 'pending' AND good_until IS NOT NULL;
CREATE UNIQUE INDEX tasks_idempotency ON tasks (namespace, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX tasks_key ON tasks (idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX tasks_parent ON tasks (parent_task_id, id) WHERE parent_task_id IS NOT NULL;
CREATE INDEX tasks_root ON tasks (root_task_id) WHERE root_task_id IS NOT NULL;
CREATE INDEX tasks_schedule ON tasks (schedule, id) WHERE schedule <> '';
CREATE INDEX tasks_state ON tasks (state, id);

ALTER TABLE steps RENAME TO steps_old;
CREATE TABLE steps (
	id           INTEGER PRIMARY KEY AUTOINCREMENT,
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
	finished_at  INTEGER,
	kind TEXT NOT NULL DEFAULT '',
	trigger_rule TEXT NOT NULL DEFAULT '',
	deps_extra INTEGER NOT NULL DEFAULT 0,
	batch_of INTEGER,
	template TEXT NOT NULL DEFAULT '',
	item TEXT,
	signal TEXT NOT NULL DEFAULT '',
	wait_timeout INTEGER NOT NULL DEFAULT 0,
	progress REAL,
	progress_msg TEXT NOT NULL DEFAULT '',
	run_timeout INTEGER NOT NULL DEFAULT 0,
	deadline INTEGER,
	child_task_id INTEGER,
	child_error TEXT,
	workflow TEXT NOT NULL DEFAULT '',
	limit_key TEXT NOT NULL DEFAULT '',
	limit_n INTEGER NOT NULL DEFAULT 0,
	task_limit_key TEXT NOT NULL DEFAULT '',
	task_limit_n INTEGER NOT NULL DEFAULT 0,
	preemptible INTEGER NOT NULL DEFAULT 0,
	rate_key TEXT NOT NULL DEFAULT '',
	rate_n INTEGER NOT NULL DEFAULT 0,
	rate_per BIGINT NOT NULL DEFAULT 0,
	breaker_key TEXT NOT NULL DEFAULT '',
	breaker_n INTEGER NOT NULL DEFAULT 0,
	breaker_cooldown INTEGER NOT NULL DEFAULT 0,
	claim_audited BIGINT NOT NULL DEFAULT 1
);
INSERT INTO steps (id, task_id, idx, name, handler, namespace, state, sub, deps, children, deps_ok, deps_failed, deps_skipped, priority, sort_key, attempt, max_attempts, ttl, expires_at, run_at, lease_id, engine_id, result, error, checkpoint, started_at, finished_at, kind, trigger_rule, deps_extra, batch_of, template, item, signal, wait_timeout, progress, progress_msg, run_timeout, deadline, child_task_id, child_error, workflow, limit_key, limit_n, task_limit_key, task_limit_n, preemptible, rate_key, rate_n, rate_per, breaker_key, breaker_n, breaker_cooldown, claim_audited)
	SELECT id, task_id, idx, name, handler, namespace, state, sub, deps, children, deps_ok, deps_failed, deps_skipped, priority, sort_key, attempt, max_attempts, ttl, expires_at, run_at, lease_id, engine_id, result, error, checkpoint, started_at, finished_at, kind, trigger_rule, deps_extra, batch_of, template, item, signal, wait_timeout, progress, progress_msg, run_timeout, deadline, child_task_id, child_error, workflow, limit_key, limit_n, task_limit_key, task_limit_n, preemptible, rate_key, rate_n, rate_per, breaker_key, breaker_n, breaker_cooldown, claim_audited FROM steps_old;
DROP TABLE steps_old;
CREATE INDEX steps_batch ON steps (task_id, batch_of, idx) WHERE batch_of IS NOT NULL;
CREATE INDEX steps_deadline ON steps (deadline) WHERE state = 'running' AND deadline IS NOT NULL;
CREATE INDEX steps_expiry ON steps (expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX steps_ready ON steps (sort_key) WHERE state = 'ready';
CREATE INDEX steps_ready_namespace ON steps (namespace, sort_key) WHERE state = 'ready' AND namespace <> '';
CREATE INDEX steps_running ON steps (namespace, engine_id) WHERE state = 'running';
CREATE INDEX steps_signal ON steps (task_id, signal, idx) WHERE state = 'waiting' AND signal != '';
CREATE UNIQUE INDEX steps_task ON steps (task_id, idx);
CREATE INDEX steps_waiting ON steps (run_at) WHERE state = 'waiting';

ALTER TABLE signals RENAME TO signals_old;
CREATE TABLE signals (
	id         INTEGER PRIMARY KEY AUTOINCREMENT,
	task_id    INTEGER NOT NULL,
	name       TEXT NOT NULL,
	payload    TEXT NOT NULL,
	created_at INTEGER NOT NULL,
	step_id    INTEGER -- the step whose wait it completed; NULL while kept
);
INSERT INTO signals (id, task_id, name, payload, created_at, step_id)
	SELECT id, task_id, name, payload, created_at, step_id FROM signals_old;
DROP TABLE signals_old;
CREATE INDEX signals_pending ON signals (task_id, name, id) WHERE step_id IS NULL;

ALTER TABLE schedule_audit RENAME TO schedule_audit_old;
CREATE TABLE schedule_audit (
	id        INTEGER PRIMARY KEY AUTOINCREMENT,
	namespace TEXT NOT NULL,
	workflow  TEXT NOT NULL,
	name      TEXT NOT NULL,
	at        INTEGER NOT NULL,
	action    TEXT NOT NULL,
	actor     TEXT NOT NULL DEFAULT '',
	reason    TEXT NOT NULL DEFAULT ''
);
INSERT INTO schedule_audit (id, namespace, workflow, name, at, action, actor, reason)
	SELECT id, namespace, workflow, name, at, action, actor, reason FROM schedule_audit_old;
DROP TABLE schedule_audit_old;
CREATE INDEX schedule_audit_key ON schedule_audit (namespace, workflow, name, id);

ALTER TABLE policy_changes RENAME TO policy_changes_old;
CREATE TABLE policy_changes (
	id     INTEGER PRIMARY KEY AUTOINCREMENT,
	at     INTEGER NOT NULL,
	actor  TEXT NOT NULL,
	target TEXT NOT NULL,
	change TEXT NOT NULL,
	reason TEXT NOT NULL DEFAULT ''
);
INSERT INTO policy_changes (id, at, actor, target, change, reason)
	SELECT id, at, actor, target, change, reason FROM policy_changes_old;
DROP TABLE policy_changes_old;

ALTER TABLE operator_log RENAME TO operator_log_old;
CREATE TABLE operator_log (
	id      INTEGER PRIMARY KEY AUTOINCREMENT,
	at      INTEGER NOT NULL,
	actor   TEXT NOT NULL,
	action  TEXT NOT NULL,
	subject TEXT NOT NULL,
	reason  TEXT NOT NULL DEFAULT ''
);
INSERT INTO operator_log (id, at, actor, action, subject, reason)
	SELECT id, at, actor, action, subject, reason FROM operator_log_old;
DROP TABLE operator_log_old;

-- The copies set each table's sequence to its largest id. A task or step
-- deleted before this migration may still be named elsewhere (the audit
-- trail, a signal, the operator log's "task N"): the sequences start above
-- those ids too.
INSERT INTO sqlite_sequence (name, seq) SELECT 'tasks', 0 WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'tasks');
INSERT INTO sqlite_sequence (name, seq) SELECT 'steps', 0 WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'steps');
UPDATE sqlite_sequence SET seq = max(seq,
	(SELECT coalesce(max(task_id), 0) FROM audit),
	(SELECT coalesce(max(task_id), 0) FROM signals),
	(SELECT coalesce(max(parent_task_id), 0) FROM tasks),
	(SELECT coalesce(max(child_task_id), 0) FROM steps),
	(SELECT coalesce(max(CAST(substr(subject, 6) AS INTEGER)), 0) FROM operator_log WHERE subject LIKE 'task %'))
	WHERE name = 'tasks';
UPDATE sqlite_sequence SET seq = max(seq,
	(SELECT coalesce(max(step_id), 0) FROM signals),
	(SELECT coalesce(max(parent_step_id), 0) FROM tasks),
	(SELECT coalesce(max(probe_step_id), 0) FROM breakers))
	WHERE name = 'steps';
