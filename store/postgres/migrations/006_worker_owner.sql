-- A remote worker belongs to the credential that registered it: owner is
-- that principal ("api_key:<key id>", "jwt:<subject>", "anonymous" with
-- authentication disabled). NULL marks an engine, which no worker route may
-- use. Workers registered before this migration have no known owner: ''
-- makes them register again (worker_lost) instead of being usable by anyone.
ALTER TABLE engines ADD COLUMN owner TEXT;
UPDATE engines SET owner = '' WHERE host LIKE 'remote worker %';
