-- Tokens reserved ahead (rates.go in internal/sqlstore): a claim that takes
-- tokens from a bucket far from its limit (at least 1,000 a period, more
-- than half full after the take) may take a few more for the engine's next
-- claims, which then use them without writing the bucket. reserved is how
-- many tokens engines hold so until reserved_until; while they do, the
-- bucket refills only up to its limit less reserved, so that the tokens
-- held and the tokens in the bucket never exceed the limit together.
-- An engine that writes the bucket again tells how many of the tokens it
-- holds it used since (released), and they no longer count as held.
-- granted is how many the last claim reserved.
ALTER TABLE rate_buckets ADD COLUMN reserved BIGINT NOT NULL DEFAULT 0;
ALTER TABLE rate_buckets ADD COLUMN reserved_until BIGINT NOT NULL DEFAULT 0;
ALTER TABLE rate_buckets ADD COLUMN granted BIGINT NOT NULL DEFAULT 0;
ALTER TABLE rate_buckets ADD COLUMN released BIGINT NOT NULL DEFAULT 0;
