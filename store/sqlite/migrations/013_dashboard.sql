-- The dashboard's reads: the activity of a recent window (tasks by the time
-- they finished, with what the charts need, so that it is read from the
-- index alone) and the search of tasks by idempotency key in any namespace,
-- each from an index rather than a scan of every task.
CREATE INDEX IF NOT EXISTS tasks_activity ON tasks (finished_at, namespace, state, started_at, run_at) WHERE finished_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS tasks_key ON tasks (idempotency_key) WHERE idempotency_key IS NOT NULL;
