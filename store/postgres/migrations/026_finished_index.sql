-- Retention and prune read finished tasks from tasks_activity, in the order
-- they finished, each entry's state checked in the index. tasks_finished
-- (state, finished_at) served them alone and was a fourth index entry
-- written with every task that finishes: about 2.5 µs of the machine's CPU
-- a one-step task in the bench's burn-down (of 87).
DROP INDEX IF EXISTS tasks_finished;
