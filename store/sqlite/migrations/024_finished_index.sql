-- Retention and prune read finished tasks from tasks_activity, in the order
-- they finished, each entry's state checked in the index. tasks_finished
-- (state, finished_at) served them alone and was one more index entry
-- written with every task that finishes.
DROP INDEX IF EXISTS tasks_finished;
