-- Webhook subscriptions: each follows the history (see 007_history) from
-- its cursor and POSTs the matching events, in order, to its URL, signed
-- with its secret. The leader delivers; a delivery that fails for a
-- passing reason is retried after next_attempt_at, one refused for good
-- disables the webhook (state 'disabled', last_error says why).
CREATE TABLE IF NOT EXISTS webhooks (
	id              INTEGER PRIMARY KEY AUTOINCREMENT,
	url             TEXT NOT NULL,
	secret          TEXT NOT NULL,
	namespace       TEXT NOT NULL DEFAULT '',
	workflow        TEXT NOT NULL DEFAULT '',
	types           TEXT NOT NULL DEFAULT '', -- comma-separated event types; '' is every type
	cursor_pos      TEXT NOT NULL DEFAULT '',
	state           TEXT NOT NULL DEFAULT 'active',
	failures        INTEGER NOT NULL DEFAULT 0,
	last_error      TEXT NOT NULL DEFAULT '',
	next_attempt_at INTEGER NOT NULL DEFAULT 0,
	delivered       INTEGER NOT NULL DEFAULT 0,
	created_at      INTEGER NOT NULL,
	created_by      TEXT NOT NULL DEFAULT ''
);
