-- Concurrency limits are counted by namespace (limits.go in
-- internal/sqlstore), from the indexes of running work every engine writes
-- anyway (steps_running; tasks_state), not from indexes of their own:
-- those were two more index entries written with every limited step
-- claimed and task started.
DROP INDEX IF EXISTS steps_limit_running;
DROP INDEX IF EXISTS tasks_limit_running;
