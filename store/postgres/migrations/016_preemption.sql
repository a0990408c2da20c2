-- Preemption: a step marked preemptible (workflow step "preemptible: true")
-- may be stopped by an engine whose slots are all busy when a step of
-- higher priority is the next it would claim; it returns to ready with its
-- checkpoint and without using an attempt.
ALTER TABLE steps ADD COLUMN preemptible INTEGER NOT NULL DEFAULT 0;
