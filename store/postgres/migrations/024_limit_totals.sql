-- Limits far from binding are bounded, not counted (limits.go in
-- internal/sqlstore). limit_claims holds, per namespace, how many steps
-- claims under its limits' lock have claimed and how many tasks they have
-- started, ever, and how many tasks an operator's retry put back to
-- running: only those ways make a step or a task under a limit running
-- (the state machine's edges into running). A count of what runs in a
-- namespace, with the totals read before it under the lock, stays an
-- upper bound of what runs there when the totals have grown since:
-- bound = count + (totals now - totals then). A claim that knows such a
-- count passes it, and the largest bound it can use (its namespace's
-- smallest limit less the claim's size); weft_limit_room then returns the
-- bound instead of counting, and counts only when the bound is past that.
CREATE TABLE IF NOT EXISTS limit_claims (
	namespace TEXT PRIMARY KEY,
	steps     BIGINT NOT NULL DEFAULT 0,
	tasks     BIGINT NOT NULL DEFAULT 0
);

-- weft_limit_room: as in migration 021 (locks, then counts), with
-- p_known: for each namespace of p_namespaces, five numbers (flattened):
-- the running steps and tasks a count found, the totals read with it,
-- and the largest bound of steps or tasks the claim can use; -1 first
-- when the claim knows no count. Rows: (-1, namespace, 0) a lock not
-- taken; (0, namespace, n) running steps, (4, namespace, n) running tasks
-- under a workflow limit, counted or bounded; (8, namespace, total) and
-- (9, namespace, total), the totals, only for a namespace counted.
DROP FUNCTION IF EXISTS weft_limit_room(text[], boolean);
CREATE OR REPLACE FUNCTION weft_limit_room(p_namespaces text[], p_wait boolean, p_known bigint[])
RETURNS TABLE (limit_kind integer, limit_name text, limit_n bigint)
LANGUAGE plpgsql VOLATILE SET enable_bitmapscan = off AS $$
DECLARE
	missed text[] := '{}';
	counted text[] := '{}';
	steps_total bigint;
	tasks_total bigint;
	i integer;
	k integer;
BEGIN
	IF p_wait THEN
		PERFORM pg_advisory_xact_lock(hashtext(current_schema() || '/weft-ns:' || n)) FROM unnest(p_namespaces) AS n;
	ELSE
		SELECT COALESCE(array_agg(n), '{}') INTO missed FROM unnest(p_namespaces) AS n
			WHERE NOT pg_try_advisory_xact_lock(hashtext(current_schema() || '/weft-ns:' || n));
	END IF;
	FOR i IN 1 .. COALESCE(array_length(p_namespaces, 1), 0) LOOP
		CONTINUE WHEN p_namespaces[i] = ANY(missed);
		k := (i - 1) * 5;
		SELECT c.steps, c.tasks INTO steps_total, tasks_total FROM limit_claims c WHERE c.namespace = p_namespaces[i];
		steps_total := COALESCE(steps_total, 0);
		tasks_total := COALESCE(tasks_total, 0);
		IF p_known IS NOT NULL AND array_length(p_known, 1) >= k + 5 AND p_known[k + 1] >= 0
			AND p_known[k + 1] + steps_total - p_known[k + 3] <= p_known[k + 5]
			AND p_known[k + 2] + tasks_total - p_known[k + 4] <= p_known[k + 5] THEN
			limit_kind := 0; limit_name := p_namespaces[i]; limit_n := p_known[k + 1] + steps_total - p_known[k + 3];
			RETURN NEXT;
			limit_kind := 4; limit_n := p_known[k + 2] + tasks_total - p_known[k + 4];
			RETURN NEXT;
		ELSE
			counted := counted || p_namespaces[i];
			limit_kind := 8; limit_name := p_namespaces[i]; limit_n := steps_total;
			RETURN NEXT;
			limit_kind := 9; limit_n := tasks_total;
			RETURN NEXT;
		END IF;
	END LOOP;
	IF missed <> '{}' THEN
		RETURN QUERY SELECT -1, m, 0::bigint FROM unnest(missed) AS m;
	END IF;
	IF counted = '{}' THEN
		RETURN; -- every namespace bounded: no count, no plan of one
	END IF;
	RETURN QUERY
		SELECT 0, s.namespace, count(*) FROM steps s
			WHERE s.state = 'running' AND s.namespace = ANY(counted)
			GROUP BY s.namespace
		UNION ALL
		SELECT 4, t.namespace, count(*) FROM tasks t
			WHERE t.state = 'running' AND t.limit_key != '' AND t.namespace = ANY(counted)
			GROUP BY t.namespace;
END
$$;
