-- Fair shares: a namespace's weight (policies.weight; 0 = the default of 1)
-- shares the claims between namespaces that have ready work while slots are
-- scarce. steps_ready_namespace lets the claim find which namespaces have
-- ready work (a skip scan, one probe per namespace) and take each one's best
-- steps by sort_key, without reading the whole ready queue. Its predicate
-- names "namespace <> ''" (true of every step) so that only the queries of
-- the fair shares, which name it too, use it: the ordinary claim keeps
-- reading steps_ready in order, even for a claim of several namespaces.
ALTER TABLE policies ADD COLUMN weight INTEGER NOT NULL DEFAULT 0;
CREATE INDEX IF NOT EXISTS steps_ready_namespace ON steps (namespace, sort_key) WHERE state = 'ready' AND namespace <> '';
