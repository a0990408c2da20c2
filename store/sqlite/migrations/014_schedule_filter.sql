-- Lists and bulk actions filter tasks by the schedule that submitted them,
-- newest first.
CREATE INDEX IF NOT EXISTS tasks_schedule ON tasks (schedule, id) WHERE schedule <> '';
