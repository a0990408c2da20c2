-- Concurrency limits are locked and counted by namespace (limits.go in
-- internal/sqlstore): a claim that takes a step under any limit of a
-- namespace holds the namespace's lock, counts the steps running in it and
-- the tasks under a workflow limit running in it, and counts a key on its
-- own only when that bound does not settle it. Limits set high then cost
-- two counts a claim instead of one lock and one count per key.
--
-- weft_limit_room takes the locks of p_namespaces (sorted: every claim
-- takes them in one order; named in the schema's name, as advisory locks are
-- the whole database's and another schema holds other work), waiting for each when p_wait, else only trying
-- (a lock not taken is returned as the row (-1, namespace, 0) and the
-- namespace is not counted), and counts what runs in each namespace it
-- locked. Its counting query takes its own snapshot after the locks are
-- granted (each statement of a VOLATILE function does, in READ COMMITTED),
-- so it sees every claim committed under them. Rows: (kind, namespace, n):
-- 0 running steps, 4 running tasks under a workflow limit; a namespace with
-- none has no row. Bitmap scans are off for the counts: a plain index scan
-- marks the entries of ended work it passes as dead, so the next count
-- skips them; a bitmap scan never does, and every count would read again
-- each task that ran since the last vacuum.
DROP FUNCTION IF EXISTS weft_limit_counts(text[], boolean, text[], text[], text[], bigint[]);
CREATE OR REPLACE FUNCTION weft_limit_room(p_namespaces text[], p_wait boolean)
RETURNS TABLE (limit_kind integer, limit_name text, limit_n bigint)
LANGUAGE plpgsql VOLATILE SET enable_bitmapscan = off AS $$
DECLARE
	missed text[] := '{}';
BEGIN
	IF p_wait THEN
		PERFORM pg_advisory_xact_lock(hashtext(current_schema() || '/weft-ns:' || n)) FROM unnest(p_namespaces) AS n;
	ELSE
		SELECT COALESCE(array_agg(n), '{}') INTO missed FROM unnest(p_namespaces) AS n
			WHERE NOT pg_try_advisory_xact_lock(hashtext(current_schema() || '/weft-ns:' || n));
	END IF;
	RETURN QUERY
		SELECT -1, m, 0::bigint FROM unnest(missed) AS m
		UNION ALL
		SELECT 0, s.namespace, count(*) FROM steps s
			WHERE s.state = 'running' AND s.namespace = ANY(p_namespaces) AND NOT (s.namespace = ANY(missed))
			GROUP BY s.namespace
		UNION ALL
		SELECT 4, t.namespace, count(*) FROM tasks t
			WHERE t.state = 'running' AND t.limit_key != '' AND t.namespace = ANY(p_namespaces) AND NOT (t.namespace = ANY(missed))
			GROUP BY t.namespace;
END
$$;
-- The counts read the indexes of running work every engine writes anyway
-- (steps_running; tasks_state), not indexes of their own: those were two
-- more index entries written with every limited step claimed and task
-- started, and cost about a tenth of the one-step throughput while no
-- limit bound.
DROP INDEX IF EXISTS steps_limit_running;
DROP INDEX IF EXISTS tasks_limit_running;
