-- The fair shares' readiness (fair.go in internal/sqlstore) in the claim's
-- first statement: weft_fair_readiness takes the fair shares' lock (named
-- in the schema's name, as advisory locks are the whole database's), then
-- finds the namespaces with ready steps, by a skip scan of
-- steps_ready_namespace (at most p_depth of them), and, when there are two
-- or more, counts their running steps. Its query takes its own snapshot
-- after the lock is granted (each statement of a VOLATILE function does,
-- in READ COMMITTED), so it sees every claim committed under the lock; a
-- claim under weights then makes no statement more than one without.
-- Rows: (1, namespace, 0) for a namespace with ready steps, (0, namespace,
-- n) for its running steps.
CREATE OR REPLACE FUNCTION weft_fair_readiness(p_lock text, p_depth integer)
RETURNS TABLE (r_kind integer, r_namespace text, r_n bigint)
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
	PERFORM pg_advisory_xact_lock(hashtext(current_schema() || '/' || p_lock));
	RETURN QUERY
		WITH RECURSIVE ready_ns(n, depth) AS (
			SELECT min(s.namespace), 1 FROM steps s WHERE s.state = 'ready' AND s.namespace <> ''
			UNION ALL
			SELECT (SELECT min(s.namespace) FROM steps s WHERE s.state = 'ready' AND s.namespace <> '' AND s.namespace > ready_ns.n), ready_ns.depth + 1
				FROM ready_ns WHERE ready_ns.n IS NOT NULL AND ready_ns.depth < p_depth
		), ready(n) AS (SELECT ready_ns.n FROM ready_ns WHERE ready_ns.n IS NOT NULL)
		SELECT 1, ready.n, 0::bigint FROM ready
		UNION ALL
		SELECT 0, s.namespace, count(*) FROM steps s
			WHERE s.state = 'running' AND s.namespace IN (SELECT ready.n FROM ready) AND (SELECT count(*) FROM ready) > 1
			GROUP BY s.namespace;
END
$$;
