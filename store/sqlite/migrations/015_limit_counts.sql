-- Nothing on SQLite: its single writer counts under the limits without
-- locks (PostgreSQL's 015 adds the function that locks and counts in one
-- round trip). Kept so that both stores number their migrations alike.
SELECT 1;
