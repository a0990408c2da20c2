-- The audit trail is kept in time partitions, so that retention drops a
-- partition instead of deleting rows (docs/architecture.md, "History in
-- time partitions"). A row's partition is chosen by part, the time it was
-- written (the database's clock); the maintenance leader creates the
-- partitions ahead and drops those past the longest retention, after
-- moving the rows of tasks still kept into audit_kept (part -infinity).
-- audit_default takes a row that no partition covers, so a write never
-- depends on the maintenance having run.
--
-- The rows written so far become audit_kept: it keeps their indexes, and
-- nothing is copied.
CREATE SEQUENCE audit_ids;
SELECT setval('audit_ids', coalesce(pg_sequence_last_value(pg_get_serial_sequence('audit', 'id')::regclass), 0) + 1, false);
ALTER TABLE audit ALTER COLUMN id DROP IDENTITY;
ALTER TABLE audit ADD COLUMN part TIMESTAMPTZ NOT NULL DEFAULT '-infinity';
ALTER TABLE audit ADD CONSTRAINT audit_kept_part CHECK (part < '1970-01-01 00:00:00+00');
ALTER TABLE audit RENAME TO audit_kept;
ALTER INDEX audit_task RENAME TO audit_kept_task;
ALTER INDEX audit_history RENAME TO audit_kept_history;
CREATE TABLE audit (LIKE audit_kept INCLUDING DEFAULTS) PARTITION BY RANGE (part);
ALTER TABLE audit ALTER COLUMN id SET DEFAULT nextval('audit_ids');
ALTER SEQUENCE audit_ids OWNED BY audit.id;
ALTER TABLE audit ALTER COLUMN part SET DEFAULT clock_timestamp();
ALTER TABLE audit ATTACH PARTITION audit_kept FOR VALUES FROM (MINVALUE) TO ('1970-01-01 00:00:00+00');
ALTER TABLE audit_kept DROP CONSTRAINT audit_kept_part;
CREATE TABLE audit_default PARTITION OF audit DEFAULT;
CREATE INDEX audit_task ON audit (task_id, id);
CREATE INDEX audit_history ON audit (txid, id);
