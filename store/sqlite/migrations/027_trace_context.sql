-- The column holds the task's W3C trace context: its traceparent and, when
-- the submitter had one, a space and its tracestate.
ALTER TABLE tasks RENAME COLUMN traceparent TO trace_context;
