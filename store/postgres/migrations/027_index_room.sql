-- Room on the leaf pages of the indexes that every update of a step or a
-- task writes again. A claim and an outcome each write a new version of
-- the row, and each version its own entry beside the last. New tasks and
-- steps are appended at the right of these indexes, where PostgreSQL fills
-- a leaf page to the index's fillfactor before it starts the next: at the
-- default (90) the versions that follow split nearly every page; at 50
-- they fit, and the entries of versions that died are removed in place
-- (bottom-up deletion) before a page fills. A one-step task cost the
-- database about 8 µs of CPU less (of 87) in the bench's burn-down, for
-- indexes up to twice as large. Only pages split or added from now on are
-- affected; REINDEX applies it to the rest.
ALTER INDEX steps_pkey SET (fillfactor = 50);
ALTER INDEX steps_task SET (fillfactor = 50);
ALTER INDEX tasks_pkey SET (fillfactor = 50);
