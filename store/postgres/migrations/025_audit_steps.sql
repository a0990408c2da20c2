-- A task's submission is written on one audit row with the states its steps
-- start in (steps: "name=state,..." in index order) instead of one row a
-- step: the audit trail and the history read it back as one entry for the
-- task and one for each step, in that order, and a task of five steps
-- writes one row instead of six at its submission.
ALTER TABLE audit ADD COLUMN steps TEXT NOT NULL DEFAULT '';
