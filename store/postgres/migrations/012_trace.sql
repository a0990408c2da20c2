-- The W3C traceparent of whoever submitted the task ('' when none): every
-- attempt of every step of the task continues that trace, on any engine,
-- after crashes and retries. It is a trace context, never a secret.
ALTER TABLE tasks ADD COLUMN traceparent TEXT NOT NULL DEFAULT '';
