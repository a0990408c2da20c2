-- API keys' grants name the namespaces they hold in: "tasks:read@shop,billing"
-- or "tasks:read@*". Namespaces are comma-separated, so grants are now
-- separated by spaces; the keys made before hold in every namespace, as
-- they always did, and now say so.
UPDATE api_keys SET permissions = replace(permissions, ',', '@* ') || '@*' WHERE permissions != '';
