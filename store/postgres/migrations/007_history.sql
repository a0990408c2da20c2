-- The history (GET /v1/events) is the audit log read in commit order. Audit
-- ids come from a sequence, which concurrent transactions commit out of
-- order, so each row also records the transaction that wrote it: readers go
-- in (txid, id) order and only up to the oldest transaction still running,
-- below which the log no longer changes. A reader that resumes from a
-- position therefore misses no row that commits later.
ALTER TABLE audit ADD COLUMN txid xid8 NOT NULL DEFAULT pg_current_xact_id();
CREATE INDEX IF NOT EXISTS audit_history ON audit (txid, id);
