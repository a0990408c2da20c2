-- Placeholder that keeps the migrations of this branch contiguous up to 018;
-- it changes nothing and is dropped when the branch is merged.
SELECT 1;
