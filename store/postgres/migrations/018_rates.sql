-- Rate limits: at most N claims per period, in bursts of up to N, counted by
-- token buckets held in the database so that they hold across engines.
--
-- Steps carry their own rate (computed at submission, like limit_key):
-- rate_key names the bucket ('' = none), rate_n tokens refill every
-- rate_per microseconds. A namespace's rate is on its policies row.
ALTER TABLE steps ADD COLUMN rate_key TEXT NOT NULL DEFAULT '';
ALTER TABLE steps ADD COLUMN rate_n INTEGER NOT NULL DEFAULT 0;
ALTER TABLE steps ADD COLUMN rate_per BIGINT NOT NULL DEFAULT 0;
ALTER TABLE policies ADD COLUMN rate_n INTEGER NOT NULL DEFAULT 0;
ALTER TABLE policies ADD COLUMN rate_per BIGINT NOT NULL DEFAULT 0;
-- rate_buckets: one token bucket per key ('ns:NAMESPACE' or
-- 'step:NS/WORKFLOW/STEP[=VALUE]'), written only by claims of steps under
-- a rate. credit is the tokens held times per_us (integers, so that every
-- engine computes the same refill); refilled_at is when credit was last
-- brought up to date; wanted and taken are how many tokens the last claim
-- asked for and took;
-- deferred_to is the latest time a step was deferred to for want of a
-- token, so that deferrals queue one behind the other.
CREATE TABLE IF NOT EXISTS rate_buckets (
	key         TEXT PRIMARY KEY,
	limit_n     INTEGER NOT NULL,
	per_us      BIGINT NOT NULL,
	credit      BIGINT NOT NULL,
	refilled_at BIGINT NOT NULL,
	wanted      INTEGER NOT NULL DEFAULT 0,
	taken       INTEGER NOT NULL DEFAULT 0,
	deferred_to BIGINT NOT NULL DEFAULT 0
);
