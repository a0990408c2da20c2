-- Step timeouts held in the database, so that a step's timeout holds
-- wherever the step runs, on a remote worker too. Existing steps have no
-- timeout and no deadline (a constant default adds the columns without
-- rewriting the table).
ALTER TABLE steps ADD COLUMN run_timeout BIGINT NOT NULL DEFAULT 0; -- how long one attempt may run; 0: no limit
ALTER TABLE steps ADD COLUMN deadline BIGINT; -- while running with a timeout: claim time plus run_timeout
CREATE INDEX IF NOT EXISTS steps_deadline ON steps (deadline) WHERE state = 'running' AND deadline IS NOT NULL;
