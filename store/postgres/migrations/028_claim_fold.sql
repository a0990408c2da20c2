-- A claim is recorded on the audit row that ends its attempt (claim: "at
-- attempt starts engine", starts 1 where the claim started the task),
-- or, for a step still running at its engine's heartbeat, on a row of its
-- own then; not on a row of its own at every claim. The audit trail shows
-- a running step's claim from the step's row (claim_audited 0: not yet on
-- an audit row). A task's start rides on the claim of its first step that
-- the claim which started it took (start_step, under lease start_lease).
-- Existing steps count as audited: their claims were written at the claim.
ALTER TABLE audit ADD COLUMN claim TEXT NOT NULL DEFAULT '';
ALTER TABLE steps ADD COLUMN claim_audited BIGINT NOT NULL DEFAULT 1;
ALTER TABLE tasks ADD COLUMN start_step BIGINT NOT NULL DEFAULT -1;
ALTER TABLE tasks ADD COLUMN start_lease BIGINT NOT NULL DEFAULT 0;
