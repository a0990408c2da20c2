-- weft_limit_counts locks the concurrency limits a claim's candidates fall
-- under and counts what runs under each, in one round trip. The counts
-- must see every claim committed before the locks were granted: a
-- statement's snapshot predates the locks it takes, but each statement of a
-- VOLATILE function takes its own snapshot when it starts (READ COMMITTED),
-- so the counting query below, run after the locks, sees them.
--
-- p_locks: the lock names, sorted (every claim takes them in one order);
-- p_wait: wait for each lock, else only try (a lock not taken is returned
-- as a row (-1, name, 0) and its limit is not counted);
-- p_caps, p_step_keys, p_task_keys: the namespaces, step keys and workflow
-- keys to count; p_tasks: tasks whose 'pending' state to read.
-- Rows: (kind, key, n): 0 namespace, 1 step key, 2 workflow key (n running),
-- 3 a task still pending (n its id), -1 a lock not taken.
CREATE OR REPLACE FUNCTION weft_limit_counts(p_locks text[], p_wait boolean, p_caps text[], p_step_keys text[], p_task_keys text[], p_tasks bigint[])
RETURNS TABLE (limit_kind integer, limit_name text, limit_n bigint)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
	missed text[] := '{}';
BEGIN
	-- One statement for all the locks, in the array's order.
	IF p_wait THEN
		PERFORM pg_advisory_xact_lock(hashtext(l)) FROM unnest(p_locks) AS l;
	ELSE
		SELECT COALESCE(array_agg(l), '{}') INTO missed FROM unnest(p_locks) AS l
			WHERE NOT pg_try_advisory_xact_lock(hashtext(l));
	END IF;
	RETURN QUERY
		SELECT -1, m, 0::bigint FROM unnest(missed) AS m
		UNION ALL
		SELECT 0, s.namespace, count(*) FROM steps s
			WHERE s.state = 'running' AND s.namespace = ANY(p_caps) AND NOT (('weft-cap:' || s.namespace) = ANY(missed))
			GROUP BY s.namespace
		UNION ALL
		SELECT 1, s.limit_key, count(*) FROM steps s
			WHERE s.state = 'running' AND s.limit_key != '' AND s.limit_key = ANY(p_step_keys) AND NOT (('weft-key:step:' || s.limit_key) = ANY(missed))
			GROUP BY s.limit_key
		UNION ALL
		SELECT 2, t.limit_key, count(*) FROM tasks t
			WHERE t.state = 'running' AND t.limit_key != '' AND t.limit_key = ANY(p_task_keys) AND NOT (('weft-key:task:' || t.limit_key) = ANY(missed))
			GROUP BY t.limit_key
		UNION ALL
		-- By primary key: (state || '') keeps the planner off the state
		-- index, which would read every pending task.
		SELECT 3, '', t.id FROM tasks t WHERE t.id = ANY(p_tasks) AND (t.state || '') = 'pending';
END
$$;
