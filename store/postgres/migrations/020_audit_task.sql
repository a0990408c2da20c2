-- A task's transition made in the same transaction as one of its steps',
-- with nothing else of the task between them (a task starting with its
-- first claimed step, ending with its last), is written on that step's
-- audit row instead of a row of its own: the audit trail and the history
-- read it back as two entries, and the busiest transitions write half the
-- rows.
ALTER TABLE audit ADD COLUMN task_from TEXT NOT NULL DEFAULT '';
ALTER TABLE audit ADD COLUMN task_to TEXT NOT NULL DEFAULT '';
ALTER TABLE audit ADD COLUMN task_reason TEXT NOT NULL DEFAULT '';
-- Nothing looks audit rows up by id alone: readers go by task (audit_task)
-- or in commit order (audit_history). The primary key's index was a third
-- index written with every row.
ALTER TABLE audit DROP CONSTRAINT IF EXISTS audit_pkey;
